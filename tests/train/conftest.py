"""The training tests, one folder per sub-package of ``arrol_pl/train``. A test module may import another folder's
by its name (``from test_distributed import launch``), so every folder is on the import path, whichever of them
pytest collects first."""

import sys
from pathlib import Path

for folder in sorted(Path(__file__).parent.iterdir()):
    if folder.is_dir() and not folder.name.startswith(("_", ".")) and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
