"""Deprecated: the learning-rate transfer of any model is ``scaling.studies.transfer`` (``scaling.transfer``).

Kept for one release so that ``from scaling.studies import user_transfer`` still works; every name is the one of
``scaling.studies.transfer``.
"""

import warnings

from scaling.studies.transfer import KEYS  # pylint: disable=unused-import
from scaling.studies.transfer import TransferResult  # pylint: disable=unused-import
from scaling.studies.transfer import combine  # pylint: disable=unused-import
from scaling.studies.transfer import heading  # pylint: disable=unused-import
from scaling.studies.transfer import transfer  # pylint: disable=unused-import

warnings.warn("scaling.studies.user_transfer is deprecated; use scaling.studies.transfer", DeprecationWarning,
              stacklevel=2)
