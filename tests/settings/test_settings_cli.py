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


def test_config_show_prints_values_and_where_they_came_from(tmp_path: Path) -> None:
    config = write(tmp_path, "silt.toml", '[agent]\nlinger.ms = 100\nflush.bytes = 1024\n'
                   '[compactor]\ngc.interval.ms = 5000\n'
                   '[metadata]\nurl = "postgresql://silt:hunter2@db:5432/silt"\n')
    env = {"SILT_AGENT_FLUSH_BYTES": "2048", "SILT_COMPACTOR_SHUTDOWN_TIMEOUT_MS": "0"}
    args = ["--config", config, "--store", "memory://x", "config", "show"]
    code, out, err = run([*args, "--json"], env)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["agent.linger.ms"] == {"value": 100, "source": "file", "from": config}
    assert shown["agent.flush.bytes"] == {"value": 2048, "source": "env",  # env over file
                                          "from": "SILT_AGENT_FLUSH_BYTES"}
    assert shown["store.url"] == {"value": "memory://x", "source": "flag", "from": None}
    assert shown["compactor.gc.interval.ms"]["value"] == 5000
    assert shown["compactor.shutdown.timeout.ms"] == {
        "value": 0, "source": "env", "from": "SILT_COMPACTOR_SHUTDOWN_TIMEOUT_MS"}
    assert shown["agent.listeners"] == {"value": "127.0.0.1:9092", "source": "default",
                                        "from": None}
    assert shown["agent.auto.create.topics.enable"]["value"] is False
    assert shown["agent.compression.type"]["value"] == "none"
    assert shown["metadata.url"]["value"] == "postgresql://silt:***@db:5432/silt"
    assert "hunter2" not in out
    code, text, err = run(args, env)
    assert code == 0, err
    lines = {line.split()[0]: line.split(maxsplit=2)[1:] for line in text.splitlines()[1:]}
    assert set(lines) == set(shown)  # every setting, once
    assert lines["agent.linger.ms"] == ["100", f"file {config}"]
    assert lines["agent.flush.bytes"] == ["2048", "env SILT_AGENT_FLUSH_BYTES"]
    assert lines["store.url"] == ["memory://x", "flag"]
    assert lines["agent.auto.create.topics.enable"] == ["false", "default"]
    assert lines["metadata.url"][0] == "postgresql://silt:***@db:5432/silt"


def test_a_bad_setting_stops_the_services_in_one_line(tmp_path: Path) -> None:
    store, md = urls(tmp_path, "s")
    env = {"SILT_STORE": store, "SILT_METADATA": md}
    config = write(tmp_path, "bad.toml", "[compactor]\nretention.check.interval.ms = 0\n")
    expected = (f"silt: invalid setting compactor.retention.check.interval.ms=0 (from file"
                f" {config}): must be an integer >= 1\n")
    for command in ("agent", "compactor", "up", "config show"):
        code, out, err = run(["--config", config, *command.split()], env)
        assert (code, out, err) == (1, "", expected), command
    code, _, err = run(["compactor"], {**env, "SILT_COMPACTOR_NO_SUCH_KEY": "1"})
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith("silt: unknown setting SILT_COMPACTOR_NO_SUCH_KEY (env)")
