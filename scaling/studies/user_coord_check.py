"""Deprecated: the coordinate check of any model is ``scaling.studies.coord_check`` (``scaling.coord_check``).

Kept for one release so that ``from scaling.studies import user_coord_check`` still works; every name is the one
of ``scaling.studies.coord_check``.
"""

import warnings

from scaling.studies.coord_check import CoordCheckResult  # pylint: disable=unused-import
from scaling.studies.coord_check import TOLERANCE  # pylint: disable=unused-import
from scaling.studies.coord_check import combine  # pylint: disable=unused-import
from scaling.studies.coord_check import coord_check  # pylint: disable=unused-import
from scaling.studies.coord_check import from_rows  # pylint: disable=unused-import
from scaling.studies.coord_check import likely_cause  # pylint: disable=unused-import
from scaling.studies.coord_check import module_roles  # pylint: disable=unused-import
from scaling.studies.coord_check import verdicts  # pylint: disable=unused-import

warnings.warn("scaling.studies.user_coord_check is deprecated; use scaling.studies.coord_check", DeprecationWarning,
              stacklevel=2)
