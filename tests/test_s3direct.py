"""extsrc.sources.s3direct: S3 GETs signed and sent by extsrc. The signature is botocore's for
the same request (compared header for header); against a real S3 server (moto) the bytes,
ranges and errors are those s3fs gives; options it does not understand read through s3fs."""

from __future__ import annotations

import datetime
import gc
import gzip
import logging
import os
import pickle
import re
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

import pytest
import storage_server
from storage_server import FaultProxy, Faults, S3Server

from extsrc.sources.fileread import FileReadProblem
from extsrc.sources.storage import Storage

pytest.importorskip("s3fs")
botocore_auth = pytest.importorskip("botocore.auth")
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

from extsrc.sources.s3direct import S3Direct, direct_client, sigv4_headers  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
s3_server = storage_server.s3_server
fault_proxy = storage_server.fault_proxy
NOW = datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=datetime.timezone.utc)
BUCKET = "extsrc-direct"
KEYS = ["plain.bin", "dir/a b+c%d.bin", "dir/ünï.bin", "~tilde/(x)=y&z;.bin", "empty.bin"]


@pytest.mark.parametrize("token", [None, "session-token/with+chars="])
@pytest.mark.parametrize("range_", [None, "bytes=5-99"])
@pytest.mark.parametrize(("host", "path"), [
    ("bucket.s3.eu-west-1.amazonaws.com", "/dir/a%20b%2Bc%25d.bin"),
    ("127.0.0.1:9000", "/bucket/%C3%BCn%C3%AF.bin"),
    ("s3.us-east-1.amazonaws.com", "/my.bucket/~tilde/%28x%29%3Dy%26z%3B.bin"),
])
def test_signature_equals_botocores(monkeypatch, token, range_, host, path) -> None:
    monkeypatch.setattr(botocore_auth, "get_current_datetime",
                        lambda remove_tzinfo=True: NOW.replace(tzinfo=None))
    scheme = "http" if host.startswith("127.") else "https"
    extra = {} if range_ is None else {"Range": range_}
    ours = sigv4_headers("GET", host, path, "eu-west-1", "AKIDEXAMPLE", "secret/key+x", token,
                         NOW, extra)
    request = AWSRequest(method="GET", url=f"{scheme}://{host}{path}", headers=dict(extra))
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    botocore_auth.S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+x", token), "s3",
                              "eu-west-1").add_auth(request)
    for name in ("Authorization", "X-Amz-Date", "X-Amz-Content-SHA256",
                 *(("X-Amz-Security-Token",) if token else ())):
        assert ours[name.lower() if name != "Authorization" else name] == request.headers[name]


@pytest.fixture(scope="module")
def objects(s3_server: S3Server) -> dict[str, bytes]:
    s3_server.make_bucket(BUCKET)
    client = s3_server.client()
    data = {k: (b"" if k == "empty.bin" else os.urandom(1000 + 17 * i))
            for i, k in enumerate(KEYS)}
    for k, v in data.items():
        client.put_object(Bucket=BUCKET, Key=k, Body=v)
    return data


def _storages(s3_server: S3Server) -> tuple[Storage, Storage]:
    return (Storage(s3_server.storage_options(), coalesce_gap=None),
            Storage(s3_server.storage_options(), coalesce_gap=None, s3_requests="s3fs"))


def test_direct_reads_equal_s3fs_reads(s3_server: S3Server, objects: dict[str, bytes]) -> None:
    direct, through_s3fs = _storages(s3_server)
    urls = [f"s3://{BUCKET}/{k}" for k in objects]
    assert direct.read_many(urls) == through_s3fs.read_many(urls) == list(objects.values())
    assert isinstance(direct._res.direct["s3"], S3Direct)
    assert through_s3fs._res.direct == {}
    ranges = [(f"s3://{BUCKET}/{k}", off, size) for k in KEYS[:4] for off, size in
              ((0, 1), (3, 200), (900, 100))]
    assert direct.read_ranges(ranges) == through_s3fs.read_ranges(ranges) == [
        objects[u.split("/", 3)[3]][off:off + size] for u, off, size in ranges]
    for storage in (direct, through_s3fs):
        # max_bytes: one ranged GET, the empty object read whole after S3 refuses its range
        assert storage.read(f"s3://{BUCKET}/empty.bin", max_bytes=10) == b""
        with pytest.raises(FileReadProblem) as e:
            storage.read(f"s3://{BUCKET}/plain.bin", max_bytes=10)
        assert e.value.reason == "file_too_large"
        # a range past the object's end: S3 answers the bytes there are, and the short read is
        # an error naming what happened
        with pytest.raises(FileReadProblem, match="changed since it was indexed"):
            storage.read_range(f"s3://{BUCKET}/plain.bin", 900, 500)
    assert direct.stats.reads == through_s3fs.stats.reads


@pytest.mark.parametrize(("url", "reason"), [
    (f"s3://{BUCKET}/no/such/key.bin", "missing"),
    ("s3://extsrc-no-such-bucket/key.bin", "missing"),
])
def test_errors_are_those_of_s3fs(s3_server: S3Server, objects: dict, url: str,
                                  reason: str) -> None:
    for storage in _storages(s3_server):
        with pytest.raises(FileReadProblem) as e:
            storage.read(url)
        assert e.value.reason == reason
        assert storage.stats.retries == 0


def test_a_storage_picklable_and_forked_reads_directly(s3_server: S3Server,
                                                       objects: dict[str, bytes]) -> None:
    storage = _storages(s3_server)[0]
    assert storage.read(f"s3://{BUCKET}/plain.bin") == objects["plain.bin"]
    copy = pickle.loads(pickle.dumps(storage))
    assert copy.read(f"s3://{BUCKET}/dir/ünï.bin") == objects["dir/ünï.bin"]
    client = storage._res.direct["s3"]
    again = pickle.loads(pickle.dumps(client))
    assert again.get(f"s3://{BUCKET}/plain.bin", 2, 9) == objects["plain.bin"][2:9]
    again.close()
    with tempfile.TemporaryFile() as stderr:
        pid = os.fork()
        if pid == 0:  # the child makes its own loop and sessions, and prints nothing
            os.dup2(stderr.fileno(), 2)
            # asyncio reports an unclosed session through logging, which pytest captures
            logging.getLogger().addHandler(logging.StreamHandler(open(2, "w", closefd=False)))
            ok = storage.read(f"s3://{BUCKET}/plain.bin") == objects["plain.bin"]
            ok = ok and client.get(f"s3://{BUCKET}/plain.bin", 0, 5) == objects["plain.bin"][:5]
            client.close()
            gc.collect()
            os._exit(0 if ok else 1)
        assert os.waitpid(pid, 0)[1] == 0
        stderr.seek(0)
        assert stderr.read().decode() == ""


def test_a_process_that_read_exits_without_a_word(s3_server: S3Server,
                                                  objects: dict[str, bytes]) -> None:
    # Nothing closed by hand, a read in a forked child through its parent's Storage and
    # client, both exiting through sys.exit: the sessions close at exit (the child's own) or
    # are left alone (the parent's, in the child), and nothing is printed.
    code = (
        "import os, sys\n"
        "from extsrc.sources.storage import Storage\n"
        f"storage = Storage({s3_server.storage_options()!r})\n"
        f"url = 's3://{BUCKET}/plain.bin'\n"
        "assert storage.read(url)\n"
        "client = storage._res.direct['s3']\n"
        "if os.fork() == 0:\n"
        "    assert storage.read(url) and client.get(url, 0, 3)\n"
        "    sys.exit(0)\n"
        "assert os.wait()[1] == 0\n")
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(repo)})
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_storages_share_one_loop_thread_and_close_their_sessions(
        s3_server: S3Server, objects: dict[str, bytes]) -> None:
    sessions = []
    for _ in range(6):  # e.g. a Storage made for each manifest or epoch, never closed
        storage = _storages(s3_server)[0]
        assert storage.read(f"s3://{BUCKET}/plain.bin") == objects["plain.bin"]
        sessions.append(storage._res.direct["s3"]._session)
        del storage
    gc.collect()
    assert [t.name for t in threading.enumerate()].count("extsrc-s3") == 1
    assert all(s.closed for s in sessions)  # their connections closed with them
    storage = _storages(s3_server)[0]
    assert storage.read(f"s3://{BUCKET}/plain.bin") == objects["plain.bin"]
    session = storage._res.direct["s3"]._session
    storage.close()
    assert session.closed
    assert storage.read(f"s3://{BUCKET}/plain.bin") == objects["plain.bin"]  # a new session


def test_a_gzip_encoded_object_is_read_as_stored(s3_server: S3Server) -> None:
    stored = gzip.compress(b"not what is stored " * 50)
    s3_server.make_bucket("extsrc-encoded")
    s3_server.client().put_object(Bucket="extsrc-encoded", Key="page.html", Body=stored,
                                  ContentEncoding="gzip")
    for storage in _storages(s3_server):
        assert storage.read("s3://extsrc-encoded/page.html") == stored
        assert storage.read_range("s3://extsrc-encoded/page.html", 3, 20) == stored[3:23]


@pytest.mark.parametrize("extra", [
    {"requester_pays": True},
    {"s3_additional_kwargs": {"SSECustomerKey": "x" * 32}},
    {"config_kwargs": {"s3": {"addressing_style": "virtual"}}},
    {"client_kwargs": {"region_name": "us-east-1", "verify": False}},
    {"use_ssl": False},
    {"profile": "extsrc-no-such-profile"},
    {"key": "only-a-key", "secret": None},
    {"config_kwargs": {"read_timeout": None}},
    {"config_kwargs": {"connect_timeout": "5"}},
    {"config_kwargs": {"max_pool_connections": 0}},
])
def test_options_it_does_not_understand_read_through_s3fs(s3_server: S3Server,
                                                          extra: dict) -> None:
    options = {**s3_server.storage_options(), **extra}
    assert direct_client(options, 8) is None
    if "config_kwargs" in extra:  # read through s3fs, not a TypeError from this path
        storage = Storage(options, retries=0)
        with pytest.raises(FileReadProblem):  # botocore's verdict on the key and options
            storage.read(f"s3://{BUCKET}/no/such/key.bin")
        assert storage._res.direct["s3"] is None


@pytest.mark.parametrize(("region", "direct"), [
    ("eu-west-1", True), ("us-gov-west-1", True), ("cn-north-1", False),
    ("us-iso-east-1", False), ("us-isob-east-1", False), ("eu-isoe-west-1", False)])
def test_regions_outside_amazonaws_com_read_through_s3fs(region: str, direct: bool) -> None:
    with storage_server.fake_credentials():  # no profile or endpoint of the machine's
        client = direct_client({"key": "k", "secret": "s", "client_kwargs": {
            "region_name": region}}, 4)
    assert (client is not None) == direct
    if direct:
        assert client._address("bucket", "k", region)[1] == f"bucket.s3.{region}.amazonaws.com"


def test_an_endpoint_from_the_environment_reads_through_s3fs(s3_server: S3Server,
                                                             monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    assert direct_client(s3_server.storage_options(), 8) is None
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    client = direct_client(s3_server.storage_options(), 8)
    assert client is not None and client.connections == 8


def test_proxies_from_the_environment_are_looked_up_once_a_host(monkeypatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example,127.0.0.1")
    client = direct_client({"key": "k", "secret": "s", "client_kwargs": {
        "region_name": "eu-west-1"}}, 4)
    assert client is not None
    assert client._proxy("https", "bucket.s3.eu-west-1.amazonaws.com") == \
        "http://proxy.invalid:3128"
    assert client._proxy("https", "internal.example") is None
    assert client._proxy("http", "127.0.0.1:9000") is None
    monkeypatch.delenv("HTTPS_PROXY")  # looked up once: the answer for a host is kept
    assert client._proxy("https", "bucket.s3.eu-west-1.amazonaws.com") == \
        "http://proxy.invalid:3128"


def test_a_batch_read_retries_each_failed_get_as_its_first_attempt(
        s3_server: S3Server, fault_proxy: FaultProxy, objects: dict[str, bytes]) -> None:
    """read_many sends a batch's first GETs together; a failed one continues through the
    retries with that failure counted as its first attempt: exactly ``retries + 1`` attempts,
    whatever path the first took."""
    urls = [f"s3://{BUCKET}/{k}" for k in objects if k != "empty.bin"]
    for times, expect in ((2, "bytes"), (3, "unreachable")):
        fault_proxy.reset(Faults(slowdown=0.5, times=times))
        storage = Storage(s3_server.storage_options(fault_proxy.endpoint), retries=2,
                          backoff=0.001)
        got = storage.read_many(urls)
        injected = fault_proxy.counts.slowdown
        assert injected >= 1, "no key selected for a fault: change the fraction"
        for url, g in zip(urls, got, strict=True):
            if not isinstance(g, FileReadProblem):
                assert g == objects[url.split("/", 3)[3]], url
        problems = [g for g in got if isinstance(g, FileReadProblem)]
        if expect == "bytes":
            assert not problems and storage.stats.retries == injected
        else:
            assert problems and all(p.reason == "unreachable" for p in problems)
            assert storage.stats.retries == 2 * len(problems)  # 3 attempts each, 2 retried
            assert injected == 3 * len(problems)


def test_a_bucket_url_is_an_error_not_its_listing(s3_server: S3Server,
                                                   objects: dict[str, bytes]) -> None:
    for storage in _storages(s3_server):
        for url in (f"s3://{BUCKET}", f"s3://{BUCKET}/"):
            with pytest.raises(FileReadProblem, match="cannot read") as e:
                storage.read(url)
            assert e.value.reason == "unreadable"
        assert storage.read(f"s3:///{BUCKET}/plain.bin") == objects["plain.bin"]
    client = direct_client(s3_server.storage_options(), 4)
    with pytest.raises(ValueError, match="names no S3 object"):
        client.get(f"s3://{BUCKET}/", 0, 10)


# -- answers moto does not give: a server of the test's own ---------------------------------------

ODD_KEY, ODD_SECRET = "odd-key", "odd-secret"


def _signature_ok(headers: Any, path: str) -> bool:
    """Whether the request's Authorization is botocore's signature of the request as this
    server received it (its Host header, its raw path), as S3 checks it."""
    auth = headers.get("Authorization")
    if auth is None:
        return False
    names = re.search(r"SignedHeaders=([^,]+)", auth).group(1).split(";")
    region = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/", auth).group(1)
    request = AWSRequest(method="GET", url=f"http://{headers['Host']}{path}",
                         headers={n: headers[n] for n in names})
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    request.context["timestamp"] = headers["x-amz-date"]
    signer = botocore_auth.S3SigV4Auth(
        Credentials(ODD_KEY, ODD_SECRET, headers.get("x-amz-security-token")), "s3", region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return auth.endswith(f"Signature={expected}")


class _OddHandler(BaseHTTPRequestHandler):
    """Checks every signature (403 SignatureDoesNotMatch otherwise; bucket ``public`` also
    answers unsigned requests) after appending to Accept-Encoding as a front end may, and answers
    GET ``/<bucket>/<key>`` (``/<key>`` at ``<bucket>.s3.<region>.amazonaws.com``) with
    :func:`_odd_object`, the way the key's name asks: ``ignores-range`` sends the whole object
    to a ranged GET, ``huge-ignores-range`` announces 1 GB and sends the start of it,
    ``wrong-range`` a range one byte later than asked, ``short`` half of the bytes its
    Content-Length announces. As AWS, its buckets are in ``eu-west-1``: a request to another
    region's host is answered 301 (302 for buckets ``found...``) with ``x-amz-bucket-region``,
    one signed for another region
    400 ``AuthorizationHeaderMalformed``. ``hosts`` lists the Host of every request."""

    protocol_version = "HTTP/1.1"
    hosts: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path  # absolute (http://host/...) when it came through as a proxy
        if "://" in path:
            path = "/" + path.split("://", 1)[1].split("/", 1)[1]
        if "Accept-Encoding" in self.headers:  # as Google's front end rewrites it
            self.headers.replace_header("Accept-Encoding",
                                        self.headers["Accept-Encoding"] + ",gzip(gfe)")
        host = self.headers["Host"]
        self.hosts.append(host)
        on_aws = host.endswith(".amazonaws.com")
        if on_aws and ".s3.eu-west-1." not in f".{host}":
            self._send(302 if host.startswith("found") else 301,  # both seen from S3
                       b"<Error><Code>PermanentRedirect</Code></Error>",
                       x_amz_bucket_region="eu-west-1")
            return
        if on_aws and "/eu-west-1/s3/" not in self.headers.get("Authorization", ""):
            self._send(400, b"<Error><Code>AuthorizationHeaderMalformed</Code>"
                            b"<Region>eu-west-1</Region></Error>")
            return
        if not (_signature_ok(self.headers, path) or (path.startswith("/public/")
                                                      and "Authorization" not in self.headers)):
            self._send(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>")
            return
        if on_aws and not host.startswith("s3."):  # virtual-hosted: the bucket in the host
            path = "/" + host.split(".s3.", 1)[0] + path
        key = unquote(path.split("/", 2)[2])
        data = _odd_object(key)
        name = key.rsplit("/", 1)[-1]
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if name.startswith("huge-ignores-range"):  # 1 GB announced, its start sent, then
            self.send_response(200)                   # nothing until the test is over
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            time.sleep(5)
            self.close_connection = True
        elif name.startswith("short"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.close_connection = True
        elif m is None or name.startswith("ignores-range"):
            self._send(200, data)
        else:
            first, last = int(m.group(1)) + name.startswith("wrong-range"), int(m.group(2))
            self._send(206, data[first:last + 1],
                       Content_Range=f"bytes {first}-{last}/{len(data)}")


def _odd_object(key: str) -> bytes:
    return b"".join(f"{key}:{i};".encode() for i in range(40))


@pytest.fixture(scope="module")
def odd_server() -> Iterator[str]:
    with storage_server.fake_credentials(), \
            storage_server.local_http_server(_OddHandler, "odd-s3") as url:
        yield url


def _odd_storage(endpoint: str, **options: Any) -> Storage:
    return Storage({"key": ODD_KEY, "secret": ODD_SECRET, "endpoint_url": endpoint,
                    "client_kwargs": {"region_name": "eu-west-1"}, **options},
                   retries=2, backoff=0.001, coalesce_gap=None)


@pytest.mark.parametrize("token", [None, "session/token+="])
def test_the_host_signed_is_the_host_sent(odd_server: str, monkeypatch, token) -> None:
    # https://minio:443 or http://host:80: an endpoint with its default port. The server is
    # reached as the HTTP proxy, so any host name can stand in the URL.
    for name in ("http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", odd_server)
    storage = _odd_storage("http://s3.extsrc.invalid:80",
                           **({} if token is None else {"token": token}))
    for key in KEYS[:4]:
        url = f"s3://bucket/{key}"
        assert storage.read(url) == _odd_object(key)
        assert storage.read_range(url, 7, 30) == _odd_object(key)[7:37]
    assert isinstance(storage._res.direct["s3"], S3Direct)


def test_a_range_is_the_range_asked_or_an_error(odd_server: str) -> None:
    storage = _odd_storage(odd_server)
    whole = _odd_object("ignores-range.bin")
    # the server sends the whole object: the range is cut from it
    assert storage.read_range("s3://bucket/ignores-range.bin", 50, 100) == whole[50:150]
    assert storage.read_range("s3://bucket/ignores-range.bin", 9, 0) == b""
    assert storage.read("s3://bucket/ignores-range.bin", max_bytes=10_000) == whole
    # only the bytes up to the range's end are read, not the gigabyte after them
    hurried = _odd_storage(odd_server, config_kwargs={"read_timeout": 2})
    assert hurried.read_range("s3://bucket/huge-ignores-range.bin", 50, 100) == \
        _odd_object("huge-ignores-range.bin")[50:150]
    with pytest.raises(FileReadProblem, match="Content-Range bytes 51-149") as e:
        storage.read_range("s3://bucket/wrong-range.bin", 50, 100)
    assert e.value.reason == "unreadable"


def test_a_body_shorter_than_its_content_length_is_an_error(odd_server: str) -> None:
    storage = _odd_storage(odd_server)
    with pytest.raises(FileReadProblem, match=r"after 3 attempts.*ContentLengthError") as e:
        storage.read("s3://bucket/short.bin")
    assert e.value.reason == "unreachable"
    assert storage.stats.retries == 2 and storage.stats.reads == 0


def test_credentials_from_the_environment_or_none(odd_server: str, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ODD_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ODD_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-from-the-environment")
    options = {"endpoint_url": odd_server, "client_kwargs": {"region_name": "eu-west-1"}}
    storage = Storage(options, retries=0)
    assert storage.read("s3://bucket/env.bin") == _odd_object("env.bin")
    assert storage._res.direct["s3"] is not None
    unsigned = Storage({**options, "anon": True}, retries=0)
    assert unsigned.read("s3://public/open.bin") == _odd_object("open.bin")
    with pytest.raises(FileReadProblem) as e:
        unsigned.read("s3://bucket/env.bin")
    assert e.value.reason == "access_denied"


def test_credentials_refreshed_slowly_do_not_stall_other_reads(odd_server: str) -> None:
    """A read whose credentials are being refreshed (an STS or SSO call) does not hold the event
    loop the other clients of the process share: another client's read completes while the
    refresh is still waiting."""
    from botocore.credentials import RefreshableCredentials

    release = threading.Event()

    def refresh(wait: bool = True) -> dict[str, Any]:
        if wait:
            release.wait(30)  # held until the other read is done
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=12)
        return {"access_key": ODD_KEY, "secret_key": ODD_SECRET, "token": None,
                "expiry_time": expiry.isoformat()}  # soon enough that each use refreshes

    def client(credentials: Any) -> S3Direct:
        return S3Direct(endpoint=odd_server, region="eu-west-1", credentials=credentials,
                        connect_timeout=5, read_timeout=5, connections=4, ca_bundle=None)

    slow = client(RefreshableCredentials.create_from_metadata(refresh(False), refresh, "test"))
    fast = client(Credentials(ODD_KEY, ODD_SECRET))
    assert fast.get("s3://bucket/warm.bin") == _odd_object("warm.bin")
    reader = threading.Thread(target=slow.get, args=("s3://bucket/slow.bin",))
    reader.start()
    got: list[bytes] = []
    other = threading.Thread(target=lambda: got.append(fast.get("s3://bucket/fast.bin")))
    other.start()
    other.join(20)  # a bound against a hang only: it finishes at once unless the loop is held
    finished_first = not other.is_alive() and not release.is_set()
    release.set()
    reader.join()
    other.join()
    assert finished_first, "the other read waited for the refresh"
    assert got == [_odd_object("fast.bin")]


def test_credentials_of_a_profile(odd_server: str, monkeypatch, tmp_path) -> None:
    (tmp_path / "credentials").write_text(
        f"[extsrc-odd]\naws_access_key_id = {ODD_KEY}\naws_secret_access_key = {ODD_SECRET}\n"
        f"[default]\naws_access_key_id = other\naws_secret_access_key = other\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    options = {"endpoint_url": odd_server, "client_kwargs": {"region_name": "eu-west-1"}}
    storage = Storage({**options, "profile": "extsrc-odd"}, retries=0)
    assert storage.read("s3://bucket/profiled.bin") == _odd_object("profiled.bin")
    assert storage._res.direct["s3"] is not None
    with pytest.raises(FileReadProblem) as e:  # the default profile's keys: not these
        Storage(options, retries=0).read("s3://bucket/profiled.bin")
    assert e.value.reason == "access_denied"


def test_a_reset_connection_is_retried_and_counted(s3_server: S3Server, fault_proxy: FaultProxy,
                                                   objects: dict[str, bytes]) -> None:
    fault_proxy.reset(Faults(drop=1.0, times=1))  # each object's first GET: a TCP reset
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), backoff=0.001,
                      coalesce_gap=None)
    urls = [f"s3://{BUCKET}/{k}" for k in KEYS[:4]]
    assert storage.read_many(urls) == [objects[k] for k in KEYS[:4]]
    assert storage.stats.retries == fault_proxy.counts.drop == 4
    assert storage.stats.failures == 0


@pytest.mark.parametrize(("concurrency", "pool", "in_flight"), [(1, None, 1), (6, 2, 2)])
def test_requests_in_flight_are_bounded_and_retries_never_deadlock(
        s3_server: S3Server, fault_proxy: FaultProxy, objects: dict[str, bytes],
        concurrency: int, pool: int | None, in_flight: int) -> None:
    # every object's first GET is throttled: with one connection, the retries wait for it
    fault_proxy.reset(Faults(delay=0.02, slowdown=1.0, times=1))
    extra = {} if pool is None else {"config_kwargs": {"max_pool_connections": pool}}
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint, **extra),
                      concurrency=concurrency, backoff=0.001, coalesce_gap=None)
    urls = [f"s3://{BUCKET}/{k}" for k in KEYS[:4]] * 3
    assert storage.read_many(urls) == [objects[u.split("/", 3)[3]] for u in urls]
    assert fault_proxy.counts.max_in_flight == in_flight
    assert storage.stats.retries == fault_proxy.counts.slowdown == 4
    assert storage.stats.retried_reasons == {"S3ResponseError": 4}


def test_buckets_it_cannot_address_read_through_s3fs(s3_server: S3Server,
                                                     fault_proxy: FaultProxy) -> None:
    # botocore resolves an access point ARN to the access point's own host (which does not
    # exist here): no request reaches the endpoint, where a GET of a bucket named
    # "arn:aws:s3:..." would be answered NoSuchBucket, read as a missing object.
    storage = Storage(s3_server.storage_options(fault_proxy.endpoint), retries=0)
    arn = "s3://arn:aws:s3:us-east-1:123456789012:accesspoint/my-ap/key.bin"
    with pytest.raises(FileReadProblem) as e:
        storage.read(arn)
    assert e.value.reason == "unreachable" and "my-ap-123456789012." in str(e.value)
    assert fault_proxy.counts.requests == 0
    on_aws = direct_client({"key": "k", "secret": "s", "client_kwargs": {
        "region_name": "us-west-2"}}, 4)  # inside s3_server: the environment is the test's
    assert not on_aws.addresses("s3://data--usw2-az1--x-s3/key.bin")  # S3 Express, on AWS
    assert on_aws.addresses("s3://data-usw2--x-s3-not/key.bin")
    assert direct_client(s3_server.storage_options(), 4).addresses(
        "s3://data--usw2-az1--x-s3/key.bin")  # a bucket like any other at an endpoint


# -- AWS addressing: the odd server as *.amazonaws.com, over TLS, behind a CONNECT proxy ---------

AWS_NAMES = [f"{w}s3.{r}.amazonaws.com" for r in ("us-east-1", "eu-west-1") for w in ("", "*.")]


def _tls_files(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its certificate written to ``folder/ca.pem``) and a server context whose
    certificate, signed by it, names :data:`AWS_NAMES`."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(name: str, key: Any, issuer: str, issuer_key: Any, ca: bool) -> Any:
        b = (x509.CertificateBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(hours=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 issuer_key.public_key()), critical=False))
        if ca:
            b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                critical=False)
        else:
            b = (b.add_extension(x509.SubjectAlternativeName(
                     [x509.DNSName(n) for n in AWS_NAMES]), critical=False)
                 .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                                critical=False))
        return b.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("extsrc test CA", ca_key, "extsrc test CA", ca_key, True)
    leaf = certificate(AWS_NAMES[0], key, "extsrc test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "server.pem").write_bytes(
        leaf.public_bytes(pem) + key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem")
    return folder / "ca.pem", context


def _tunnel_to(target: str) -> type[BaseHTTPRequestHandler]:
    """An HTTPS proxy's handler: every CONNECT, whatever host it names, is tunnelled to
    ``target`` (``https://127.0.0.1:<port>``)."""
    address = ("127.0.0.1", int(target.rsplit(":", 1)[1]))

    class Tunnel(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_CONNECT(self) -> None:
            self.close_connection = True
            with socket.create_connection(address) as upstream:
                self.send_response(200, "Connection established")
                self.end_headers()
                ends = [self.connection, upstream]
                while True:
                    ready, _, _ = select.select(ends, [], [], 10)
                    data = ready and ready[0].recv(65536)
                    if not data:
                        return
                    (upstream if ready[0] is self.connection else self.connection).sendall(data)

    return Tunnel


@pytest.fixture
def far_aws(tmp_path: Path, monkeypatch) -> Iterator[Storage]:
    """A Storage on "AWS" (the odd server over TLS, reached through an HTTPS proxy) configured
    for us-east-1, where the buckets named *far* are in eu-west-1."""
    ca, context = _tls_files(tmp_path)
    with storage_server.fake_credentials(), \
            storage_server.local_http_server(_OddHandler, "odd-aws", tls=context) as aws, \
            storage_server.local_http_server(_tunnel_to(aws), "odd-tunnel") as proxy:
        for name in ("https_proxy", "NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", proxy)
        monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))
        _OddHandler.hosts.clear()
        yield Storage({"key": ODD_KEY, "secret": ODD_SECRET,
                       "client_kwargs": {"region_name": "us-east-1"}}, retries=0)


def test_on_aws_a_bucket_in_another_region_is_followed_there_once(far_aws: Storage) -> None:
    storage = far_aws
    for bucket in ("extsrc-far", "extsrc.far.dotted", "found-far"):
        for key in ("a b+c.bin", "dir/ünï.bin"):
            assert storage.read(f"s3://{bucket}/{key}") == _odd_object(f"{key}")
        assert storage.read_range(f"s3://{bucket}/x.bin", 5, 10) == _odd_object("x.bin")[5:15]
    assert storage._res.direct["s3"].endpoint is None
    assert _OddHandler.hosts == [
        "extsrc-far.s3.us-east-1.amazonaws.com", *["extsrc-far.s3.eu-west-1.amazonaws.com"] * 3,
        "s3.us-east-1.amazonaws.com", *["s3.eu-west-1.amazonaws.com"] * 3,
        "found-far.s3.us-east-1.amazonaws.com", *["found-far.s3.eu-west-1.amazonaws.com"] * 3]


def test_a_batch_in_another_region_arrives_whole(far_aws: Storage) -> None:
    """A batch's GETs are all signed before the first answer teaches the bucket's region: each
    one redirected is resent to that region, compared with the region it was signed for, not
    with what another request learnt meanwhile."""
    names = [f"k{i}.bin" for i in range(8)]
    got = far_aws.read_many([f"s3://extsrc-far/{n}" for n in names])
    assert got == [_odd_object(n) for n in names]
    assert far_aws.stats.failures == 0
