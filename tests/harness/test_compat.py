"""harness.compat's pure parts: reading librdkafka's test table, a runner's output and
report, and docs/compatibility.md's rows (a partial run keeps the other rows)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from harness.compat import oidc, report, suite, tls
from harness.compat.run import Result, parse_run, plan, reclassified

TEST_C = """
struct test tests[] = {
    /* Special MAIN test */
    {.name = "<MAIN>", .flags = TEST_F_LOCAL},
    _TEST(0000_unittests, TEST_F_LOCAL, _THRES(.ucpu = 100.0, .rss = 900.0)),
    _TEST(0001_multiobj, 0),
    _TEST(0028_long_topicnames,
          TEST_F_KNOWN_ISSUE,
          TEST_BRKVER(0, 9, 0, 0),
          .extra = "https://github.com/confluentinc/librdkafka/issues/529"),
    _TEST(0045_subscribe_update, 0, TEST_BRKVER(0, 9, 0, 0)),
    _TEST(0045_subscribe_update_topic_remove,
          0,
          TEST_BRKVER(0, 9, 0, 0),
          .scenario = "noautocreate"),
#if WITH_SOCKEM
    _TEST(0049_consume_conn_close, TEST_F_SOCKEM, TEST_BRKVER(0, 9, 0, 0)),
#endif
    _TEST(0055_producer_latency, TEST_F_KNOWN_ISSUE_WIN32),
    _TEST(0097_ssl_verify, 0),
    _TEST(0103_transactions, 0, TEST_BRKVER(0, 11, 0, 0), .scenario = "default,ak23"),
    _TEST(0107_topic_recreate, 0, TEST_BRKVER_TOPIC_ADMINAPI, .scenario = "noautocreate"),
    _TEST(0170_share_consumer_subscription, 0, TEST_BRKVER(4, 2, 0, 0)),
    _TEST(8000_idle, TEST_F_MANUAL),
    {NULL}};
"""


def test_the_table_is_read_with_flags_versions_and_scenarios() -> None:
    entries = {e.name: e for e in suite.parse_tests(TEST_C)}
    assert len(entries) == 12
    assert entries["0000_unittests"].flags == {"TEST_F_LOCAL"}
    assert entries["0028_long_topicnames"].flags == {"TEST_F_KNOWN_ISSUE"}
    assert entries["0028_long_topicnames"].min_version == (0, 9, 0, 0)
    assert entries["0045_subscribe_update_topic_remove"].scenario == "noautocreate"
    assert entries["0103_transactions"].scenarios == ("default", "ak23")
    assert entries["0103_transactions"].scenario == "default"
    assert entries["0055_producer_latency"].scenario == "low-linger"  # ours
    assert entries["0055_producer_latency"].flags == {"TEST_F_KNOWN_ISSUE_WIN32"}


def test_broker_tests_are_those_needing_a_broker_at_our_version() -> None:
    names = [e.name for e in suite.broker_tests(TEST_C, "4.0.0")]
    assert names == ["0001_multiobj", "0028_long_topicnames", "0045_subscribe_update",
                     "0045_subscribe_update_topic_remove", "0049_consume_conn_close",
                     "0055_producer_latency", "0097_ssl_verify", "0103_transactions",
                     "0107_topic_recreate"]
    assert "0170_share_consumer_subscription" in [
        e.name for e in suite.broker_tests(TEST_C, "4.2.0")]


def test_a_number_runs_once_per_scenario_and_not_run_ones_are_left_out() -> None:
    runs = plan(suite.broker_tests(TEST_C), None)
    assert [(number, scenario, [e.name for e in group]) for number, scenario, group in runs] == [
        ("0001", "default", ["0001_multiobj"]),
        ("0045", "default", ["0045_subscribe_update"]),
        ("0045", "noautocreate", ["0045_subscribe_update_topic_remove"]),
        ("0049", "default", ["0049_consume_conn_close"]),
        ("0055", "low-linger", ["0055_producer_latency"]),
        ("0097", "ssl", ["0097_ssl_verify"]),
        ("0103", "default", ["0103_transactions"]),
        ("0107", "noautocreate", ["0107_topic_recreate"]),
    ]  # 0028 n/a
    assert [n for n, _, _ in plan(suite.broker_tests(TEST_C), {"0045", "0097"})] == [
        "0045", "0045", "0097"]


OUTPUT = (
    "\x1b[36m[0045_subscribe_update / 1.0s] TEST FAILURE\n"
    '\x1b[31m### Test "0045_subscribe_update (do_test_regex:220)" failed at test.c:5257:'
    "test_kafka_topics() at Fri Nov 27 09:13:09 2026: ###\n"
    "expected 4 partitions, got 2\n"
    '\x1b[31m### Test "0045_subscribe_update (later:300)" failed at x.c:1:f() at now: ###\n'
    "a second failure\n"
    "TEST 20261127 (bare, scenario default) SUMMARY\n"
    "|\x1b[32m 0001_multiobj                            |     PASSED |   2.500s \x1b[0m|\n"
    "|\x1b[31m 0045_subscribe_update                    |     FAILED |   1.000s \x1b[0m|"
    "\x1b[31m expected 4 partitions, got 2\x1b[0m\n"
    "|\x1b[36m 0016_client_swname                       |    SKIPPED |   0.100s \x1b[0m|"
    "\x1b[36m Env var BROKER_ADDRESS_2 missing\x1b[0m\n"
)


def _report(tmp_path: Path, states: dict[str, str]) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"tests": {
        name: {"name": name, "state": state, "duration": 1.5} for name, state in states.items()
    }}))
    return path


def test_a_run_is_read_from_the_report_with_the_first_failure_and_skip_reasons(
        tmp_path: Path) -> None:
    entries = {e.name: e for e in suite.parse_tests(TEST_C)}
    entries["0016_client_swname"] = suite.Entry("0016_client_swname", frozenset(), (0,),
                                                ("default",))
    path = _report(tmp_path, {"0001_multiobj": "PASSED", "0045_subscribe_update": "FAILED",
                              "0016_client_swname": "SKIPPED",
                              "0045_subscribe_update_topic_remove": "SKIPPED"})
    got = parse_run(OUTPUT, path, [entries[n] for n in (
        "0001_multiobj", "0045_subscribe_update", "0016_client_swname",
        "0045_subscribe_update_topic_remove", "0097_ssl_verify")])
    assert got["0001_multiobj"] == Result("0001_multiobj", "pass", 1.5, "")
    assert got["0045_subscribe_update"] == Result(
        "0045_subscribe_update", "fail", 1.5,
        "do_test_regex:220: expected 4 partitions, got 2 (test.c:5257:test_kafka_topics())")
    assert got["0016_client_swname"].status == "skipped"
    assert got["0016_client_swname"].detail == "Env var BROKER_ADDRESS_2 missing"
    # skipped without a reason (not selected by the runner) and not in the report: missing
    assert set(got) == {"0001_multiobj", "0045_subscribe_update", "0016_client_swname"}
    assert parse_run(OUTPUT, tmp_path / "absent.json", list(entries.values())) == {}


def test_the_page_keeps_rows_not_rerun_and_counts_them_all() -> None:
    first = [Result("0001_multiobj", "pass", 2.5), Result("0045_x", "fail", 1.0, "a | b"),
             Result("0097_ssl_verify", "pending", None, "issue 25"),
             Result("0055_producer_latency", "n/a", 40.0, "latency 34.9ms")]
    page = report.render(first, None, 0.0, "abc1234")
    assert report.rows(page) == {r.name: r for r in first}
    assert "**1 passed, 1 failed, 0 skipped by the runner, of 2 run**; 1 not applicable" in page
    assert suite.NOTES["0055"] in page
    again = report.render([Result("0045_x", "pass", 3.0)], page, 0.0, "def5678")
    assert report.rows(again)["0045_x"] == Result("0045_x", "pass", 3.0, "")
    assert report.rows(again)["0001_multiobj"] == first[0]
    assert "**2 passed, 0 failed" in again and "def5678 (these rows" in again


def test_known_failures_are_reclassified_and_others_stay_failures() -> None:
    e = {n: suite.Entry(n, frozenset(), (0,), ("default",))
         for n in ("0055_producer_latency", "0142_reauthentication", "0012_produce_consume")}
    latency = Result("0055_producer_latency", "fail", 40.0, "average latency 34.9ms")
    assert reclassified(e["0055_producer_latency"], latency) == Result(
        "0055_producer_latency", "n/a", 40.0, "average latency 34.9ms")
    share = Result("0142_reauthentication", "fail", 15.0, "do_test_share_consumer:131: test"
                   " share consumer message loss while reauthenticating: error")
    assert reclassified(e["0142_reauthentication"], share).status == "n/a"
    assert reclassified(e["0142_reauthentication"], share).detail.endswith(share.detail)
    other = Result("0142_reauthentication", "fail", 15.0,
                   "do_test_producer:300: test producer message loss while reauthenticating")
    assert reclassified(e["0142_reauthentication"], other) == other
    passed = Result("0012_produce_consume", "pass", 1.9)
    assert reclassified(e["0012_produce_consume"], passed) == passed


def test_ssl_fixtures_are_trivups_in_every_encoding(tmp_path: Path) -> None:
    """0097 loads the client certificate as PEM (key encrypted with SSL_password), DER and
    PKCS#12; each must hold the same certificate, issued by the CA the agent trusts."""
    fx = tls.make(tmp_path)
    env, password = fx.runner_env, tls.PASSWORD.encode()
    pem = x509.load_pem_x509_certificate(Path(env["SSL_pub_pem"]).read_bytes())
    assert x509.load_der_x509_certificate(Path(env["SSL_pub_der"]).read_bytes()) == pem
    ca = x509.load_der_x509_certificate(Path(env["SSL_ca_der"]).read_bytes())
    assert pem.issuer == ca.subject
    assert fx.agent_env["SILT_AGENT_SSL_CA_LOCATION"] == env["SSL_all_cas_pem"]
    assert fx.agent_env["SILT_AGENT_SSL_CLIENT_AUTH"] == "required"
    key, cert, cas = pkcs12.load_key_and_certificates(
        Path(env["SSL_pkcs"]).read_bytes(), password)
    assert cert == pem and cas == [ca] and key is not None
    encrypted = Path(env["SSL_priv_pem"]).read_bytes()
    with pytest.raises(TypeError):  # encrypted: no password, no key
        serialization.load_pem_private_key(encrypted, None)
    assert serialization.load_pem_private_key(encrypted, password).public_key() == \
        pem.public_key()
    assert dict(fx.conf)["ssl.key.password"] == tls.PASSWORD


def _token_request(url: str, body: str = "", **headers: str) -> tuple[int, dict[str, str]]:
    """The status and JSON answer of a POST (a GET without a body) to the OIDC endpoint."""
    request = urllib.request.Request(url, data=body.encode() if body else None,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_oidc_endpoint_answers_as_trivups(tmp_path: Path) -> None:
    """0126's token endpoint: `/retrieve` grants trivup's scopes to client credentials, to a
    JWT-bearer assertion signed by the client's key and to an Azure IMDS query naming its
    identity; `/retrieve/expire` and `/retrieve/badformat` answer tokens the agent's JWKS
    refuses (expired, signature broken)."""
    endpoint, fx = oidc.make(tmp_path)
    try:
        env = fx.runner_env
        jwks = jwt.PyJWKSet.from_json(
            Path(fx.agent_env["SILT_AGENT_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL"]).read_text())
        key = jwks.keys[0].key

        def claims(token: str) -> dict[str, object]:
            return dict(jwt.decode(token, key, algorithms=["RS256"], audience=oidc.AUDIENCE,
                                   issuer=oidc.ISSUER))

        basic = {"Authorization": "Basic MTIzOmFiYw=="}
        status, got = _token_request(env["VALID_OIDC_URL"],
                                     "grant_type=client_credentials&scope=test", **basic)
        assert status == 200 and claims(got["access_token"])["sub"] == "subject"
        assert _token_request(env["VALID_OIDC_URL"],
                              "grant_type=client_credentials&scope=invalid_scope",
                              **basic)[0] == 400
        client = serialization.load_pem_private_key(
            Path(env["OAUTHBEARER_CLIENT_PRIVATE_KEY_ENCRYPTED"]).read_bytes(),
            env["OAUTHBEARER_CLIENT_PRIVATE_KEY_PASSWORD"].encode())
        assertion = jwt.encode({"sub": "testuser"}, client, algorithm="RS256")  # type: ignore[arg-type]
        status, got = _token_request(
            env["VALID_OIDC_URL"],
            f"grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion={assertion}")
        assert status == 200 and claims(got["access_token"])["sub"] == "testuser"
        imds = f"{env['VALID_OIDC_URL']}?api-version=2025-04-07&resource=r&client_id=c"
        status, got = _token_request(imds, Metadata="true")
        assert status == 200 and claims(got["access_token"])["client_id"] == "c"
        assert _token_request(imds.replace("&client_id=c", ""), Metadata="true")[0] == 400
        with pytest.raises(jwt.ExpiredSignatureError):
            claims(_token_request(env["EXPIRED_TOKEN_OIDC_URL"], "x=1")[1]["access_token"])
        with pytest.raises(jwt.InvalidTokenError):  # its signature does not decode
            claims(_token_request(env["INVALID_OIDC_URL"], "x=1")[1]["access_token"])
    finally:
        endpoint.shutdown()
        endpoint.server_close()
