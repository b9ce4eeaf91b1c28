"""QUIC server and client for the balancer's connection-ID routing test (tests/quic.rs), on aioquic.

server: answers every request stream with "NAME: <request>" on each --vip, issuing connection IDs
        that carry --id (--id-len bytes, big-endian, from byte --id-offset of the ID), the layout a
        flowplane VIP with quic = true reads. Prints "listening" once every socket is bound.
client: opens --connections connections to --vip:--port; on each, one request, then --rebinds
        times: a new UDP socket (a source port new to the connection, as a NAT rebinding gives),
        every other time a new connection ID as well, and one request. Prints one line per
        request:
            conn K step S port P answer NAME      or      conn K step S port P timeout
        A connection stops at its first timeout. Exit status 0 whatever the answers (the test
        judges them).
"""

import argparse
import asyncio
import datetime
import os
import select
import socket
import ssl
import sys
import tempfile
import time

import aioquic.quic.connection as quic_connection
from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived

ALPN = ["fp-test"]
CID_LEN = 8


class ServerIdRandom:
    """Stands in for the `os` module inside aioquic's connection code: connection IDs (the only
    CID_LEN-byte random values it draws besides path challenges) carry the server id."""

    def __init__(self, server_id, offset, length):
        self.id_bytes = server_id.to_bytes(length, "big")
        self.offset = offset

    def urandom(self, n):
        b = bytearray(os.urandom(n))
        if n == CID_LEN:
            b[self.offset:self.offset + len(self.id_bytes)] = self.id_bytes
        return bytes(b)

    def __getattr__(self, name):
        return getattr(os, name)


def self_signed(directory):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flowplane-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def run_server(args):
    quic_connection.os = ServerIdRandom(args.id, args.id_offset, args.id_len)
    config = QuicConfiguration(
        is_client=False, alpn_protocols=ALPN, connection_id_length=CID_LEN
    )
    config.load_cert_chain(*self_signed(tempfile.mkdtemp(prefix="fp-quic-")))
    name = args.name.encode()

    class Echo(QuicConnectionProtocol):
        def quic_event_received(self, event):
            if isinstance(event, StreamDataReceived) and event.end_stream:
                self._quic.send_stream_data(
                    event.stream_id, name + b": " + event.data, end_stream=True
                )
                self.transmit()

    async def main():
        for vip in args.vip:
            await serve(vip, args.port, configuration=config, create_protocol=Echo)
        print("listening", flush=True)
        await asyncio.Future()

    asyncio.run(main())


class Client:
    def __init__(self, vip, port):
        self.addr = (vip, port)
        self.family = socket.AF_INET6 if ":" in vip else socket.AF_INET
        config = QuicConfiguration(
            is_client=True, alpn_protocols=ALPN, connection_id_length=CID_LEN
        )
        config.verify_mode = ssl.CERT_NONE
        self.conn = QuicConnection(configuration=config)
        self.sock = None
        # Sockets left behind by rebinds, kept open until the connection ends: a port closed
        # and freed could be handed out again by the next bind, and then that rebinding would
        # not change the source port at all.
        self.left = []
        self.rebind()
        self.conn.connect(self.addr, now=time.time())

    def rebind(self):
        if self.sock is not None:
            self.left.append(self.sock)
        self.sock = socket.socket(self.family, socket.SOCK_DGRAM)
        self.sock.bind(("", 0))
        return self.sock.getsockname()[1]

    def pump(self, done, timeout):
        """Run the connection until done(event) holds for an event, or timeout."""
        deadline = time.time() + timeout
        while True:
            now = time.time()
            for data, addr in self.conn.datagrams_to_send(now=now):
                self.sock.sendto(data, addr)
            event = self.conn.next_event()
            while event is not None:
                if isinstance(event, ConnectionTerminated):
                    return None
                if done(event):
                    return event
                event = self.conn.next_event()
            timer = self.conn.get_timer()
            wake = deadline if timer is None else min(deadline, timer)
            readable, _, _ = select.select([self.sock], [], [], max(0.0, wake - now))
            now = time.time()
            if readable:
                data, addr = self.sock.recvfrom(65536)
                self.conn.receive_datagram(data, addr, now=now)
            elif timer is not None and now >= timer:
                self.conn.handle_timer(now=now)
            if now >= deadline:
                return None

    def request(self, text, timeout):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_stream_data(sid, text.encode(), end_stream=True)
        ev = self.pump(
            lambda e: isinstance(e, StreamDataReceived) and e.stream_id == sid and e.end_stream,
            timeout,
        )
        if ev is None:
            return None
        return ev.data.decode().split(":", 1)[0]


def run_client(args):
    for k in range(args.connections):
        c = Client(args.vip[0], args.port)
        port = c.sock.getsockname()[1]
        for step in range(args.rebinds + 1):
            if step > 0:
                port = c.rebind()
                if step % 2 == 0:
                    c.conn.change_connection_id()
            answer = c.request(f"conn {k} step {step}", args.timeout)
            if answer is None:
                print(f"conn {k} step {step} port {port} timeout", flush=True)
                break
            print(f"conn {k} step {step} port {port} answer {answer}", flush=True)
        c.conn.close()
        c.pump(lambda e: False, 0.05)
        for s in c.left + [c.sock]:
            s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client"])
    p.add_argument("--vip", action="append", required=True)
    p.add_argument("--port", type=int, default=4433)
    p.add_argument("--id", type=int, default=0)
    p.add_argument("--id-offset", type=int, default=1)
    p.add_argument("--id-len", type=int, default=2)
    p.add_argument("--name", default="server")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--rebinds", type=int, default=4)
    p.add_argument("--timeout", type=float, default=3.0)
    args = p.parse_args()
    if args.mode == "server":
        run_server(args)
    else:
        run_client(args)


if __name__ == "__main__":
    sys.exit(main())
