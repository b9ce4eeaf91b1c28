"""A path with a fixed delay, for tests/flowlet_live.rs (this kernel has no netem).

relay.py IN OUT DELAY_MS DST_MAC: every IPv4 frame received on IN is sent out of OUT DELAY_MS
milliseconds later, in arrival order, with destination MAC DST_MAC and OUT's own source MAC. The
kernel of the namespace must not forward (ip_forward = 0): this process is the path. Prints
"relaying" once both sockets are open; runs until killed.
"""

import collections
import select
import socket
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def mac_bytes(text):
    return bytes(int(b, 16) for b in text.split(":"))


def main():
    inp, out, delay_ms, dst = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    delay = delay_ms / 1000.0
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    rx.bind((inp, 0))
    rx.setblocking(False)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((out, 0))
    header = mac_bytes(dst) + tx.getsockname()[4][:6]
    queue = collections.deque()
    print("relaying", flush=True)
    while True:
        now = time.monotonic()
        timeout = max(0.0, queue[0][0] - now) if queue else 1.0
        readable, _, _ = select.select([rx], [], [], timeout)
        if readable:
            while True:
                try:
                    frame, addr = rx.recvfrom(65535)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING or frame[12:14] != b"\x08\x00":
                    continue
                queue.append((time.monotonic() + delay, header + frame[12:]))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            tx.send(queue.popleft()[1])


if __name__ == "__main__":
    main()
