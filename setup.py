"""What pyproject.toml cannot state: the presets, kept at the top of the checkout in conf/, ship in the wheel as the
package arrol_pl.conf (Hydra reads them as pkg://arrol_pl.conf; arrol_pl/cli/hydra_app.py), each preset group a
package of its own so that every YAML file goes in."""

from setuptools import find_namespace_packages, find_packages, setup

GROUPS = [f"arrol_pl.conf.{group}" for group in find_namespace_packages(where="conf", exclude=["*__pycache__*"])]

setup(
    packages=[*find_packages(include=["arrol_pl", "arrol_pl.*"]), "arrol_pl.conf", *GROUPS],
    package_dir={"arrol_pl.conf": "conf"},
    package_data={"arrol_pl": ["py.typed"], **{package: ["*.yaml"] for package in ["arrol_pl.conf", *GROUPS]}},
)
