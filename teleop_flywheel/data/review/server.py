"""`teleop-flywheel review DIR`: look at the rejections with your own eyes, in a local page.

Serves DIR (a session's output: bags, `quarantine/`, `validation.json`, the dataset) on
127.0.0.1, a free port (`--port` to choose), under a random token: every URL is
`http://127.0.0.1:PORT/<token>/...` and any request without it gets 404 (nothing else). It prints
the URL and opens nothing. `--host` other than loopback only when given, with a warning on stderr
(anyone who can reach the port and learns the URL can read the bags and write reviews).

Routes below the token: `/` the list, `/episode.html?key=K` one episode, `/assets/<file>` the
page's own files (shipped in this package: the page works offline, no CDN), `/api/episodes`,
`/api/episode/K`, `/api/episode/K/frame/<camera>/<index>` (the recorded JPEG as it is),
`POST /api/review`, and `/files/<path below DIR>` with Range requests (the bag for Foxglove or
Lichtblick). Every file path is resolved and proven inside DIR (`core.files.inside`); episodes
are named by a key (a hash of their path), never by a path.

`--summary` serves nothing: it prints what the review log says per reason code (`suggest.py`):
reviewed, confirmed, overruled, and the threshold that would have kept the overruled rejections.

Why the standard library's `http.server.ThreadingHTTPServer`: a local, single-user page needs a
dozen routes, Range and a POST; it adds no dependency, and threads let the page fetch frames while a
bag decodes. Plots are drawn on a canvas by the page's own script (`assets/review.js`, a few hundred
lines) rather than a plotting library, so nothing has to be vendored or fetched.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import mimetypes
import re
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from teleop_flywheel.core.errors import OutsideRootError
from teleop_flywheel.core.files import inside
from teleop_flywheel.core.names import identifier_problem
from teleop_flywheel.data.errors import ReviewError
from teleop_flywheel.data.provenance.reviews import append_review, latest_by_episode, read_reviews
from teleop_flywheel.data.review.episodes import EpisodeCache, RowCache, ScoreCache

ASSETS = Path(__file__).with_name("assets")
_KEY = re.compile(r"[0-9a-f]{16}")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
MAX_BODY = 64 * 1024


class ReviewSite:
    """The folder, its token and reviewer, and what the handlers share (the index, decoded episodes)."""

    def __init__(self, root: Path, reviewer: str, token: str | None = None) -> None:
        self.root = root.resolve()
        self.reviewer = reviewer
        self.token = token or secrets.token_urlsafe(18)
        self.cache = EpisodeCache()
        self.rows = RowCache()
        self.scores = ScoreCache()
        self._paths: dict[str, Path] = {}
        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def episodes(self) -> list[dict[str, Any]]:
        """Rescanned on every ask (a validate run may have moved bags since), reviews joined in."""
        rows = self.rows.scan(self.root)
        with self._lock:
            self._paths = {r["key"]: self.root / r["path"] for r in rows}
            self._rows = {r["key"]: r for r in rows}
        reviews = latest_by_episode(read_reviews(self.root))
        scores = self.scores.scores(self.root)
        return [self._with_reviews(r, reviews) | {"scores": scores.get(r["episode_id"] or "")} for r in rows]

    @staticmethod
    def _with_reviews(row: dict[str, Any], reviews: dict[str, dict[str, Any]]) -> dict[str, Any]:
        rev = reviews.get(row["episode_id"] or "")
        return row | {"review": rev["verdict"] if rev else None, "reviews": rev["reviews"] if rev else []}

    def row(self, key: str) -> tuple[Path, dict[str, Any]] | None:
        """The bag and its row (with the reviews as the log holds them now), or None."""
        with self._lock:
            known = key in self._paths
        if not known:
            self.episodes()
        with self._lock:
            if key not in self._paths:
                return None
            path, row = self._paths[key], self._rows[key]
        return path, self._with_reviews(row, latest_by_episode(read_reviews(self.root)))


class Handler(BaseHTTPRequestHandler):
    site: ReviewSite  # set on the subclass `serve` makes
    server_version = "teleop-flywheel-review"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # the terminal shows the URL only; errors reach the page as JSON

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # The page may load only what this server serves: nothing leaves the machine.
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' blob:; "
                                                    "style-src 'self'; script-src 'self'")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _error(self, status: int, why: str) -> None:
        self._json({"error": why}, status)

    def _route(self) -> tuple[str, dict[str, list[str]]] | None:
        """The path below the token, or None (then 404 has been sent)."""
        url = urlsplit(self.path)
        parts = url.path.split("/", 2)
        if len(parts) < 2 or not hmac.compare_digest(parts[1].encode(), self.site.token.encode()):
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return None
        return unquote(parts[2] if len(parts) > 2 else ""), parse_qs(url.query)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        routed = self._route()
        if routed is None:
            return
        path, _query = routed
        try:
            if path in ("", "index.html"):
                self._asset("index.html")
            elif path == "episode.html":
                self._asset("episode.html")
            elif path.startswith("assets/"):
                self._asset(path.removeprefix("assets/"))
            elif path == "api/episodes":
                self._json({"root": str(self.site.root), "reviewer": self.site.reviewer,
                            "episodes": self.site.episodes()})
            elif path.startswith("api/episode/"):
                self._episode(path.removeprefix("api/episode/").split("/"))
            elif path.startswith("files/"):
                self._file(path.removeprefix("files/"))
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such page: {path}")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        routed = self._route()
        if routed is None:
            return
        if routed[0] != "api/review":
            self._error(HTTPStatus.NOT_FOUND, "POST goes to api/review only")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._error(HTTPStatus.BAD_REQUEST, f"a review is a JSON body of 1..{MAX_BODY} bytes")
            return
        try:
            body = json.loads(self.rfile.read(length))
            key = body["key"]
            if not isinstance(key, str) or not _KEY.fullmatch(key):
                raise ReviewError("key: not an episode key")
            found = self.site.row(key)
            if found is None:
                self._error(HTTPStatus.NOT_FOUND, f"no episode {key}")
                return
            bag, row = found
            episode_id = row["episode_id"] or self.site.cache.get(bag).detail["episode_id"]
            line = append_review(self.site.root, self.site.reviewer, episode_id, row["path"],
                                 row["codes"] + row["warning_codes"], str(body.get("verdict")),
                                 body.get("note", ""))
        except (ValueError, KeyError, TypeError) as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"review not recorded: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - an unreadable bag without a recorded id: said, not a crash
            self._error(HTTPStatus.UNPROCESSABLE_ENTITY, f"review not recorded: {exc}")
            return
        self._json(line)

    def _asset(self, name: str) -> None:
        try:
            path = inside(ASSETS, name)
        except OutsideRootError:
            self._error(HTTPStatus.FORBIDDEN, "outside the page's assets")
            return
        if not path.is_file():
            self._error(HTTPStatus.NOT_FOUND, f"no asset {name}")
            return
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self._send(HTTPStatus.OK, path.read_bytes(), kind + ("; charset=utf-8" if kind.startswith("text/") or
                                                             kind.endswith("javascript") else ""))

    def _episode(self, parts: list[str]) -> None:
        if not parts or not _KEY.fullmatch(parts[0]):
            self._error(HTTPStatus.NOT_FOUND, "not an episode key")
            return
        found = self.site.row(parts[0])
        if found is None:
            self._error(HTTPStatus.NOT_FOUND, f"no episode {parts[0]}")
            return
        bag, row = found
        try:
            data = self.site.cache.get(bag)
        except Exception as exc:  # noqa: BLE001 - a bag that cannot be decoded: its row and why
            if len(parts) == 1:
                self._json({"row": row, "error": f"cannot show this bag: {exc}"})
            else:
                self._error(HTTPStatus.NOT_FOUND, f"cannot decode this bag: {exc}")
            return
        if len(parts) == 1:
            self._json({"row": row, "error": None} | data.detail)
        elif len(parts) == 4 and parts[1] == "frame" and parts[3].isdigit():
            camera, index = parts[2], int(parts[3])
            images = data.frames.get(camera) if identifier_problem(camera) is None else None
            if images is None or index >= len(images.data):
                self._error(HTTPStatus.NOT_FOUND, f"no frame {index} of camera {camera!r}")
                return
            self._send(HTTPStatus.OK, images.data[index], "image/jpeg", {"Cache-Control": "max-age=3600"})
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such episode resource")

    def _file(self, rel: str) -> None:
        """A file below DIR, with a single byte Range (what Foxglove's remote-file reader asks for)."""
        try:
            path = inside(self.site.root, rel)
            if Path(rel).is_absolute():
                raise OutsideRootError(f"{rel}: absolute")
        except OutsideRootError:
            self._error(HTTPStatus.FORBIDDEN, "outside the reviewed folder")
            return
        if not path.is_file():
            self._error(HTTPStatus.NOT_FOUND, f"no file {rel}")
            return
        size = path.stat().st_size
        start, end, status = 0, size - 1, HTTPStatus.OK
        header = self.headers.get("Range")
        if header:
            m = _RANGE.fullmatch(header.strip())
            if not m or (not m[1] and not m[2]):
                self._send(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, b"", "text/plain",
                           {"Content-Range": f"bytes */{size}"})
                return
            if m[1]:
                start, end = int(m[1]), min(int(m[2]), size - 1) if m[2] else size - 1
            else:
                start = max(0, size - int(m[2]))
            if start > end or start >= size:
                self._send(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, b"", "text/plain",
                           {"Content-Range": f"bytes */{size}"})
                return
            status = HTTPStatus.PARTIAL_CONTENT
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        extra = {"Accept-Ranges": "bytes", "Access-Control-Allow-Origin": "*"}
        if status == HTTPStatus.PARTIAL_CONTENT:
            extra["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._send(status, body, "application/octet-stream", extra)


def serve(site: ReviewSite, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A bound server (port 0: a free one); the caller runs `serve_forever` and `server_close`."""
    handler = type("SiteHandler", (Handler,), {"site": site})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def url_of(server: ThreadingHTTPServer, site: ReviewSite) -> str:
    host, port = server.server_address[:2]
    host = host.decode() if isinstance(host, bytes) else host
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/{site.token}/"


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"

