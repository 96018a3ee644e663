"""Drive a toolsrv over its Unix socket with python-9p, whose wire codec is
plan9port's C code (convM2S/convS2M): an independent 9P2000 implementation.

Usage: plan9port_client.py SOCKET SECRET WORKDIR
Prints "ok" and exits 0 when every check passed; raises otherwise.
"""

import json
import sys
import threading
import time

from py9p import NOFID, OREAD, ORDWR, OWRITE, Client, Dir
from py9p.client import RemoteError
from py9p.messages import Rflush, Tflush, Tread

sock, secret, workdir = sys.argv[1], sys.argv[2].encode(), sys.argv[3]


def expect_error(fn, needle):
    try:
        fn()
    except RemoteError as e:
        assert needle in str(e), (needle, str(e))
        return
    raise AssertionError(f"expected an error containing {needle!r}")


def dirs(data):
    out, i = [], 0
    while i < len(data):
        size = int.from_bytes(data[i : i + 2], "little") + 2
        out.append(Dir.from_bytes(data[i : i + size]))
        i += size
    return out


c = Client.connect_unix(sock, msize=65536)
v = c.negotiate()
assert v.version == "9P2000", v

# Attaching without authentication is refused.
expect_error(lambda: c.attach(fid=0, uname="agent"), "authentication required")

# Tauth, write the secret, read the token back, attach with the afid.
from py9p.messages import Rauth, Tauth  # noqa: E402

c.rpc(Tauth(afid=100, uname="agent", aname=""), Rauth)
c.write(100, secret)
token = c.read(100, 256).decode().strip()
assert len(token) == 64, token
c.attach(fid=0, uname="agent", afid=100)

# A second connection with a different secret fails.
c2 = Client.connect_unix(sock, msize=8192)
c2.negotiate()
c2.rpc(Tauth(afid=1, uname="agent", aname=""), Rauth)
c2.write(1, b"wrong-secret")
expect_error(lambda: c2.read(1, 256), "authentication failed")
c2.close()

fids = iter(range(1, 99))


def rdwr(path, data, mode=ORDWR):
    f = next(fids)
    c.walk(0, f, path)
    c.open(f, int(mode))
    if data is not None:
        c.write(f, data)
    out = b""
    while True:
        chunk = c.read(f, 8192, len(out))
        if not chunk:
            break
        out += chunk
    c.clunk(f)
    return out


# Directory listing of the root.
f = next(fids)
c.walk(0, f, "")
c.open(f, int(OREAD))
names = sorted(d.name for d in dirs(c.read(f, 8192, 0)))
c.clunk(f)
assert names == ["all", "bypass", "ctl", "info", "proc", "search", "tools", "tools_rev"], names

info = json.loads(rdwr("info", None, OREAD))
assert info["platform"] == "linux", info

f = next(fids)
c.walk(0, f, "proc/new")
st = c.stat(f)
c.clunk(f)
assert st.name == "new" and st.mode & 0o777 == 0o666, st

f = next(fids)
c.walk(0, f, "ctl")
c.open(f, int(OWRITE))
c.write(f, b"load p9 echo\nload p9 sleep\n")
expect_error(lambda: c.write(f, b"bogus"), "unknown ctl command")
c.clunk(f)
assert rdwr("tools_rev", b"p9") == b"2\n"

payload = f"token={token}\ntool=echo\nagent=p9\ntext=plan9port\\nline two\n".encode()
result = json.loads(rdwr("proc/new", payload))
assert result["isError"] is False, result
assert json.loads(result["content"][0]["text"]) == {"text": "plan9port\nline two"}, result

forged = b"token=forged\ntool=echo\nagent=p9\n"
expect_error(lambda: rdwr("proc/new", forged), "invalid token")

pid = rdwr("proc/new.bg", f"token={token}\ntool=echo\nagent=p9\n".encode()).decode().strip()
assert rdwr(f"proc/{pid}/wait", None, OREAD) == b"0\n"
stat = json.loads(rdwr(f"proc/{pid}/stat", None, OREAD))
assert stat["state"] == "exited" and stat["tool"] == "echo", stat

# Flush a blocked synchronous call: the sleep tool's process must go away.
f = next(fids)
c.walk(0, f, "proc/new")
c.open(f, int(ORDWR))
c.write(f, f"token={token}\ntool=sleep\nagent=p9\n".encode())
result = {}


def blocked_read():
    try:
        result["r"] = c.rpc(Tread(fid=f, offset=0, count=8192), tag=77)
    except Exception as e:  # the flushed read gets no reply
        result["e"] = e


t = threading.Thread(target=blocked_read, daemon=True)
t.start()
deadline = time.time() + 10
import os  # noqa: E402

pidfile = os.path.join(workdir, "sleep.pid")
while not os.path.exists(pidfile):
    assert time.time() < deadline, "sleep tool did not start"
    time.sleep(0.02)
child = int(open(pidfile).read().strip())
c.rpc(Tflush(oldtag=77), Rflush)
def running(pid):
    """True while `pid` exists and is not a zombie (it may vanish while we look)."""
    try:
        with open(f"/proc/{pid}/stat") as st:
            return "Z" not in st.read().split(")")[-1][:3]
    except (FileNotFoundError, ProcessLookupError):
        return False


deadline = time.time() + 3
while running(child):
    assert time.time() < deadline, "flushed call's process still alive"
    time.sleep(0.02)
c.clunk(f)

# Operations the namespace refuses.
expect_error(lambda: c.create(0, "x", 0o644, int(OWRITE)), "create")
print("ok")
