"""A broker process with PLAINTEXT, SSL (client certificates required, the common name as
the user) and SASL_SSL (PLAIN alice, SCRAM-SHA-512) listeners, for the TLS tests."""

from __future__ import annotations

import time

from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.tls_certs import TlsFiles

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')


class TlsBroker:
    def __init__(self, data_dir, files: TlsFiles) -> None:
        self.files = files
        self.ssl_port, self.sasl_ssl_port, self.plain_port = free_port(), free_port(), free_port()
        self.proc = BrokerProcess(data_dir, port=self.plain_port, overrides={
            **BROKER_DEFAULTS,
            # the harness waits for the first listener
            "listeners": f"PLAINTEXT://127.0.0.1:{self.plain_port},SSL://127.0.0.1:{self.ssl_port},"
                         f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(files.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(files.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            # the certificate's common name is the user (Kafka's documented example)
            "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=.*$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": 50,
        })

    @property
    def ssl(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def plain(self) -> str:
        return f"127.0.0.1:{self.plain_port}"

    def log(self) -> str:
        return self.proc.stderr_path.read_text()

    def wait_logged(self, text: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in (log := self.log()):
                return log
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in the broker's log:\n{self.log()[-3000:]}")
