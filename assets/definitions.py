"""The code location: every definition under ``assets/defs/``, found by Dagster's defs loader.

``dg dev`` and ``dg check defs`` load this module (pyproject.toml's ``[tool.dg]`` names it), and so
do ``dagster-webserver`` and ``dagster-daemon`` through workspace.yaml. The loader finds the project through pyproject.toml (``[tool.dg.project]``), so the project runs
from its checkout or an editable install (``scripts/setup.sh``).
"""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
