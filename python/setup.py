# Metadata is in pyproject.toml; this shim lets scripts/wheel.sh tag the wheel
# for the platform of the libraries it bundles.
from setuptools import setup

setup()
