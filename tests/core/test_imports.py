import subprocess
import sys

import pytest


@pytest.mark.subprocess
def test_core_imports_neither_vllm_nor_lightning():
    code = (
        "import sys, importlib, pkgutil, arrol_pl.core as core\n"
        "for m in pkgutil.iter_modules(core.__path__): importlib.import_module('arrol_pl.core.' + m.name)\n"
        "heavy = ('vllm', 'lightning', 'pytorch_lightning', 'transformers')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core pulled in heavy modules: {out.stdout}"
