"""A checkpoint or an export names a reward function (``reward.function=module:function`` in its recorded config);
no command that reads one imports it unless the user names it again: ``arrol evaluate``, ``arrol head-quality``,
``arrol grad-probe`` and ``trainer.resume`` refuse in one line naming the recorded function and how to opt in,
before any model loads. The hostile file here is a module beside the checkpoint, in the working directory, that
leaves a marker when it is imported."""

import json
import sys
from pathlib import Path

import pytest
import warm_python
import torch
from hydra import compose, initialize_config_dir

from arrol_pl.train.config.loader import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONF = str(ROOT / "conf")
RECORDED = "mymod:fn"

HOSTILE = """
from pathlib import Path

Path(__file__).with_name("imported").write_text("the module ran")


def fn(prompt, completion, answer):
    return 1.0
"""


class Hostile:
    """A working directory holding ``mymod.py``, a run whose ``summary.json`` records ``reward.function=mymod:fn``
    beside its ``export/``, and a resumable checkpoint recording the same."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "mymod.py").write_text(HOSTILE)
        self.marker = root / "imported"
        self.export = root / "run" / "export"
        (self.export / "quality_head").mkdir(parents=True)
        (self.export / "quality_head" / "config.json").write_text("{}")
        (self.export / "config.json").write_text("{}")
        config = {"reward": {"function": RECORDED}}
        (root / "run" / "summary.json").write_text(json.dumps({"config": config}))
        self.checkpoint = root / "run" / "checkpoints" / "last.ckpt"
        self.checkpoint.parent.mkdir()
        torch.save(
            {
                "state_dict": {},
                "optimizer_states": [],
                "PromptDataModule": {},
                "global_step": 2,
                "arrol": {"config": config, "policy_dir": str(self.export)},
            },
            self.checkpoint,
        )


@pytest.fixture
def hostile(tmp_path, monkeypatch) -> Hostile:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the opt-in adds the working directory
    monkeypatch.delitem(sys.modules, "mymod", raising=False)
    yield Hostile(tmp_path)
    sys.modules.pop("mymod", None)  # the opt-in imports it: no other test finds this one


def composed(name: str, load, *overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return load(compose(name, overrides=list(overrides)))


def refused(hostile: Hostile, call) -> str:
    with pytest.raises(ConfigError) as err:
        call()
    message = str(err.value)
    assert f"was trained with reward.function={RECORDED}, which is not imported" in message
    assert f"pass reward.function={RECORDED} to use it" in message and "\n" not in message
    assert not hostile.marker.exists(), "the recorded module was imported"
    return message


def test_no_command_imports_the_reward_function_a_checkpoint_or_export_records(hostile):
    from arrol_pl.analysis.eval_config import load_eval_config
    from arrol_pl.analysis.grad_probe.config import load_grad_probe_config
    from arrol_pl.analysis.head_probe.config import load_probe_config
    from arrol_pl.cli.evaluate import check
    from arrol_pl.train.config.run import load_run_config
    from arrol_pl.train.run.prelaunch import preflight

    for checkpoint in (hostile.export, hostile.checkpoint):
        cfg = composed("evaluate", load_eval_config, f"checkpoint={checkpoint}")
        message = refused(hostile, lambda: check(cfg))
        assert message.startswith(f"checkpoint={str(checkpoint)!r}") and "or reward.function=math_verify" in message
    refused(hostile, lambda: composed("probe", load_probe_config, f"policy={hostile.export}"))
    refused(hostile, lambda: composed("grad_probe", load_grad_probe_config, f"policy={hostile.export}"))
    run = composed("config", load_run_config, f"trainer.resume={hostile.checkpoint}")
    message = refused(hostile, lambda: preflight(run, hostile.root / "resumed"))
    assert "a resume continues its run's reward" in message and "or reward.function=math_verify" not in message

    # opting out scores with math-verify, and nothing is imported
    cfg = composed("evaluate", load_eval_config, f"checkpoint={hostile.export}", "reward.function=math_verify")
    check(cfg)
    assert cfg.reward.function == "math_verify" and not hostile.marker.exists()
    # opting in imports the function the user named, as any reward.function on the command line
    cfg = composed("probe", load_probe_config, f"policy={hostile.export}", f"reward.function={RECORDED}")
    assert cfg.reward.function == RECORDED and hostile.marker.exists()


def test_a_resume_keeps_its_runs_reward_when_named_and_refuses_another():
    from arrol_pl.train.run.prelaunch import check_resumed_reward

    saved = {"reward": {"function": RECORDED}}
    check_resumed_reward(saved, RECORDED, "last.ckpt")  # named again: the run continues with it
    check_resumed_reward({}, "math_verify", "last.ckpt")  # a checkpoint that records none
    check_resumed_reward({"reward": {"function": "math_verify"}}, "math_verify", "last.ckpt")
    with pytest.raises(
        ConfigError,
        match=r"^trainer.resume='last.ckpt' was trained with reward.function=mymod:fn, "
        r"this run sets other:fn: a resume continues its run's reward",
    ):
        check_resumed_reward(saved, "other:fn", "last.ckpt")


@pytest.mark.subprocess
def test_evaluate_refuses_the_recorded_function_in_one_line_exit_2(hostile):
    out = warm_python.run(
        [
            sys.executable,
            "-m",
            "arrol_pl",
            "evaluate",
            f"checkpoint={hostile.export}",
            f"hydra.run.dir={hostile.root / 'eval'}",
        ],
        cwd=hostile.root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"was trained with reward.function={RECORDED}, which is not imported" in out.stderr
    assert "Traceback" not in out.stderr and not hostile.marker.exists() and not (hostile.root / "eval").exists()
