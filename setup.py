"""Installs the `scaling` library and the `experiments` entry points."""

import pathlib
import re

import setuptools


def read_version() -> str:
  """``__version__`` of scaling/__init__.py, read as text (importing scaling would need its dependencies)."""
  text = (pathlib.Path(__file__).parent / "scaling" / "__init__.py").read_text()
  return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


setuptools.setup(
    # The import name is scaling; the distribution has a name of its own (an unrelated "scaling" is on PyPI).
    name="attention-logit-scaling",
    version=read_version(),
    description="Attention logit scaling: rules, metrics, parametrizations and experiments.",
    packages=setuptools.find_packages(include=["scaling", "scaling.*", "experiments", "experiments.*", "benchmarks",
                                               "benchmarks.*"]),
    # The shipped corpora (scaling/training/data/corpora/README.md): --text_file=shakespeare.
    package_data={"scaling": ["training/data/corpora/*.txt", "training/data/corpora/README.md"]},
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.3",
        "chex>=0.1.87",
        "absl-py>=2.0",
        "numpy>=1.26",
        "matplotlib>=3.7",
        "orbax-checkpoint>=0.11",
        "rich>=13",
    ],
    extras_require={
        "tensorboard": ["tensorboardX>=2.6"],
        "wandb": ["wandb>=0.19.10"],
        # The tests of the trackers read what they write, so the test extra installs both; the recipes for models
        # written with Equinox and Haiku (docs/your_model.md) are tested on those libraries.
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6.80", "tensorboardX>=2.6", "wandb>=0.19.10",
                 "equinox>=0.11", "dm-haiku>=0.0.13"],
    },
)
