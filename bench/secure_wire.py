"""The wire suite over SASL_SSL next to PLAINTEXT, on ONE agent in the same run: produce and
fetch MiB/s per agent core through its PLAINTEXT listener and through its SASL_SSL listener
(SCRAM-SHA-512, TLS 1.2+ with a certificate made here), alternated; and the connection
set-up time per mechanism (a fresh confluent-kafka client until its first Metadata answer,
median of `connections`), PLAINTEXT, SSL, SASL_PLAINTEXT PLAIN and SCRAM-SHA-512, SASL_SSL
SCRAM-SHA-512; and the cipher's own cost in this process (`cipher_rates`: the floor TLS
puts under any agent). `python -m bench.secure_wire [records] [rounds]` prints the rows as
JSON."""

from __future__ import annotations

import contextlib
import json
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from agent.config import AgentConfig
from agent.protocol.tls import Tls
from agent.protocol.tlsconn import READ_BUFFER, WRITE_PIECE
from agent.sasl.scram import make_credential
from harness.agent_process import AgentProcess
from harness.certs import CertificateAuthority
from metadata import MetadataStore

from .wire import TOPIC, WireParams, run_fetch, run_produce

PASSWORD = "bench-pw"
FETCH_PASSES = 4  # a fetch of 200,000 records takes ~0.2 s of agent CPU: 4 passes, ~0.8 s


def _setup_ms(bootstrap: str, conf: dict[str, Any], connections: int) -> float:
    """Median ms from a new client to its first Metadata answer."""
    times = []
    for _ in range(connections):
        start = time.perf_counter()
        admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
        admin.list_topics(timeout=30)
        times.append((time.perf_counter() - start) * 1000)
        del admin
    return round(statistics.median(times), 1)


def _handshake(server: ssl.SSLObject, client: ssl.SSLObject, to_server: ssl.MemoryBIO,
               from_server: ssl.MemoryBIO, to_client: ssl.MemoryBIO,
               from_client: ssl.MemoryBIO) -> None:
    while True:
        done = 0
        for side in (client, server):
            try:
                side.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
        to_server.write(from_client.read())
        to_client.write(from_server.read())
        if done == 2:
            return


def cipher_rates(server_context: ssl.SSLContext, client_context: ssl.SSLContext,
                 mib: int = 256) -> dict[str, Any]:
    """MiB/s per core of TLS alone, in this thread: the server side of a handshake between
    two SSLObjects over memory BIOs encrypting `mib` MiB as the agent's TLS listeners do
    (WRITE_PIECE bytes per SSLObject.write, the ciphertext read out), and decrypting the
    client's records of as many bytes (READ_BUFFER bytes of ciphertext in, read into one
    buffer). What no transport can save: the floor under the SASL_SSL figures."""
    bios = [ssl.MemoryBIO() for _ in range(4)]
    to_server, from_server, to_client, from_client = bios
    server = server_context.wrap_bio(to_server, from_server, server_side=True)
    client = client_context.wrap_bio(to_client, from_client, server_hostname="localhost")
    _handshake(server, client, to_server, from_server, to_client, from_client)
    data = memoryview(bytes(16 << 20))
    plain = memoryview(bytearray(READ_BUFFER))
    chunks = max(1, mib // 16)
    encrypt = decrypt = 0.0
    for _ in range(chunks):
        start = time.thread_time()
        for offset in range(0, len(data), WRITE_PIECE):
            server.write(data[offset:offset + WRITE_PIECE])
            from_server.read()
        encrypt += time.thread_time() - start
        client.write(data)  # the client's records (not timed), decrypted by the server
        records = memoryview(from_client.read())
        start = time.thread_time()
        for offset in range(0, len(records), READ_BUFFER):
            to_server.write(records[offset:offset + READ_BUFFER])
            with contextlib.suppress(ssl.SSLWantReadError):
                while server.read(READ_BUFFER, plain):
                    pass
        decrypt += time.thread_time() - start
    cipher = server.cipher()
    return {"measure": "cipher", "version": server.version(),
            "cipher": cipher[0] if cipher else "",
            "encrypt_mib_s_per_core": round(16 * chunks / encrypt, 1),
            "decrypt_mib_s_per_core": round(16 * chunks / decrypt, 1)}


def run(records: int = 100_000, rounds: int = 2, connections: int = 15) -> list[dict[str, Any]]:
    """The rows (benchmark "secure"): set-up times, then `rounds` alternated produce and
    fetch runs of `records` 1 KiB records through each of the two listeners, then the
    cipher's rates (the agent's server context, a default client)."""
    return [{"benchmark": "secure", **row} for row in _run(records, rounds, connections)]


def _run(records: int, rounds: int, connections: int) -> list[dict[str, Any]]:
    p = WireParams(store="file", records=records, rate_mib_s=0, seconds=0, partitions=16)
    with tempfile.TemporaryDirectory(prefix="silt-secure-wire-") as tmp:
        ca = CertificateAuthority(Path(tmp) / "certs")
        server = ca.issue("server", "CN=localhost", server=True)
        md_url = f"sqlite:///{tmp}/md.db"
        with MetadataStore.open(md_url, create=True) as md:
            md.create_topic(TOPIC, p.partitions)
            md.alter_scram_credentials([], [
                ("bench", make_credential("SCRAM-SHA-512", PASSWORD, 4096))])
        agent = AgentProcess(f"file://{tmp}/objects", md_url, Path(tmp) / "agent.log", {
            "SILT_AGENT_SSL_CERTIFICATE_LOCATION": str(server.cert),
            "SILT_AGENT_SSL_KEY_LOCATION": str(server.key),
            "SILT_AGENT_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-512"})
        agent.listeners = {"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                           "SASL_SSL": "SASL_SSL"}
        agent.start()
        tls = {"ssl.ca.location": str(ca.path)}
        scram = {"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench",
                 "sasl.password": PASSWORD}
        plain = {**scram, "sasl.mechanisms": "PLAIN"}
        ways = {
            "PLAINTEXT": (agent.bootstrap, {}),
            "SSL": (agent.address("SSL"), {"security.protocol": "SSL", **tls}),
            "SASL_PLAINTEXT PLAIN": (agent.address("SASL_PLAINTEXT"),
                                     {"security.protocol": "SASL_PLAINTEXT", **plain}),
            "SASL_PLAINTEXT SCRAM-SHA-512": (agent.address("SASL_PLAINTEXT"),
                                             {"security.protocol": "SASL_PLAINTEXT", **scram}),
            "SASL_SSL SCRAM-SHA-512": (agent.address("SASL_SSL"),
                                       {"security.protocol": "SASL_SSL", **tls, **scram}),
        }
        rows: list[dict[str, Any]] = []
        try:
            for name, (bootstrap, conf) in ways.items():
                rows.append({"measure": "connection_setup_ms", "listener": name,
                             "median_ms": _setup_ms(bootstrap, conf, connections)})
            for rnd in range(rounds):
                for name in ("PLAINTEXT", "SASL_SSL SCRAM-SHA-512"):
                    bootstrap, conf = ways[name]
                    rows.append({"round": rnd, "listener": name,
                                 **run_produce(agent, p, bootstrap, conf)})
                    rows.append({"round": rnd, "listener": name,
                                 **run_fetch(agent, p, records, bootstrap, conf, FETCH_PASSES)})
        finally:
            agent.terminate()
        config = AgentConfig(ssl_certificate_location=str(server.cert),
                             ssl_key_location=str(server.key))
        rows.append(cipher_rates(Tls(config).context,
                                 ssl.create_default_context(cafile=str(ca.path)),
                                 16 * max(1, records // 8192)))
    return rows


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    for row in run(*args):
        print(json.dumps(row))
