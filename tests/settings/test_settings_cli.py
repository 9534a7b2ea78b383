"""The `silt` CLI on the settings layer: --config, SILT_* variables, flags on top."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cli.main import cli


def run(args: list[str], env: dict[str, str], input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def urls(tmp_path: Path, name: str) -> tuple[str, str]:
    return f"file://{tmp_path}/{name}/objects", f"sqlite:///{tmp_path}/{name}/md.db"


def topics(args: list[str], env: dict[str, str]) -> list[str]:
    code, out, err = run([*args, "topics", "list", "--json"], env)
    assert code == 0, err
    return [t["name"] for t in json.loads(out)]


def test_store_and_metadata_from_file_env_and_flags(tmp_path: Path) -> None:
    for name in ("file", "env", "flag"):
        store, md = urls(tmp_path, name)
        assert run(["--store", store, "--metadata", md, "topics", "create", name,
                    "--partitions", "1"], {})[0] == 0
    store, md = urls(tmp_path, "file")
    config = write(tmp_path, "silt.toml", f'[store]\nurl = "{store}"\n[metadata]\nurl = "{md}"\n')
    assert topics(["--config", config], {}) == ["file"]
    env_store, env_md = urls(tmp_path, "env")
    env = {"SILT_STORE": env_store, "SILT_METADATA": env_md}
    assert topics(["--config", config], env) == ["env"]
    flag_store, flag_md = urls(tmp_path, "flag")
    assert topics(["--config", config, "--store", flag_store, "--metadata", flag_md],
                  env) == ["flag"]


def test_bad_setting_is_one_line_exit_1(tmp_path: Path) -> None:
    store, md = urls(tmp_path, "x")
    config = write(tmp_path, "bad.toml", "[agent]\nlinger.ms = -1\n")
    code, out, err = run(["--config", config, "--store", store, "--metadata", md,
                          "topics", "list"], {})
    assert code == 1 and out == ""
    assert err == (f"silt: invalid setting agent.linger.ms=-1 (from file {config}):"
                   " must be an integer >= 0\n")
    code, _, err = run(["topics", "list"], {"SILT_STORE": "nosuch://x", "SILT_METADATA": md})
    assert code == 1 and err.startswith("silt: invalid setting store.url=nosuch://x (from env")
    assert len(err.splitlines()) == 1
    code, _, err = run(["--config", str(tmp_path / "missing.toml"), "topics", "list"], {})
    assert code == 2 and "missing.toml" in err


def test_produce_takes_the_agent_section(tmp_path: Path) -> None:
    store, md = urls(tmp_path, "p")
    env = {"SILT_STORE": store, "SILT_METADATA": md}
    assert run(["topics", "create", "t", "--partitions", "1"], env)[0] == 0
    line = '{"key": "k", "value": "v"}\n'
    config = write(tmp_path, "small.toml", "[agent]\nbuffer.memory = 1024\nflush.bytes = 512\n")
    assert run(["--config", config, "produce", "t"], env, line)[0] == 0
    # An explicit buffer.memory is kept, so a bigger flush is refused, flag or env.
    code, _, err = run(["--config", config, "produce", "t", "--flush-bytes", "2048"], env, line)
    assert code == 1 and "agent.buffer.memory=1024: must be an integer >= flush.bytes" in err
    code, _, err = run(["--config", config, "produce", "t"],
                       {**env, "SILT_AGENT_FLUSH_BYTES": "2048"}, line)
    assert code == 1 and "agent.buffer.memory=1024" in err
    # Left at its default, the buffer grows with --flush-bytes (8x), as before.
    assert run(["produce", "t", "--flush-bytes", str(128 * 1024 * 1024)], env, line)[0] == 0
    code, out, _ = run(["consume", "t"], env)
    assert code == 0 and len(out.splitlines()) == 2


def test_plan_takes_the_planner_section(tmp_path: Path) -> None:
    store, md = urls(tmp_path, "plan")
    env = {"SILT_STORE": store, "SILT_METADATA": md}
    assert run(["topics", "create", "t", "--partitions", "1"], env)[0] == 0
    for i in range(2):
        assert run(["produce", "t"], env, f'{{"key": "k", "value": "{i}"}}\n')[0] == 0
    code, out, err = run(["plan", "--json"], env)
    assert code == 0 and json.loads(out)["jobs"] == [], err
    code, out, err = run(["plan", "--json"], {**env, "SILT_PLANNER_L0_TRIGGER_FILES": "2"})
    assert code == 0, err
    (job,) = json.loads(out)["jobs"]
    assert job["trigger"] == "file_count" and len(job["input_files"]) == 2
