"""``lingtest review``'s web app: FastAPI, one server-rendered page per topic (Jinja2) and a
small vanilla-JS file that posts each action as JSON and swaps in the re-rendered page.

Why this stack: FastAPI, Starlette, Jinja2 and uvicorn are already installed with Prefect,
so the app adds no dependency and needs no build step, CDN or network; the server renders
everything from the session (one source of truth: the tree file), so the script only sends
clicks and keystrokes and shows the scores it is sent back.
"""
from __future__ import annotations

import socket
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel

from lingtest.tasks.adaptive.review_app.session import ReviewSession
from lingtest.tasks.core.errors import LingtestError

HERE = Path(__file__).parent
HOST = "127.0.0.1"


class Topic(BaseModel):
    topic: str


class Round(BaseModel):
    topic: str
    pairs: bool | None = None


class Suggestion(BaseModel):
    topic: str
    sid: str
    verdict: str
    text: str | None = None


class Text(BaseModel):
    topic: str
    text: str
    verdict: str = ""


class Row(BaseModel):
    id: str
    label: str = ""
    topic: str = ""


class Name(BaseModel):
    topic: str
    name: str


class Choice(BaseModel):
    model: str | None = None
    generator: str | None = None


def create_app(session: ReviewSession) -> FastAPI:
    """The app over one ``ReviewSession``."""
    app = FastAPI(title="lingtest review", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=HERE / "templates")
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.exception_handler(LingtestError)
    async def refused(_request: Request, error: LingtestError) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=400)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, topic: str = ""):
        return templates.TemplateResponse(request, "review.html", {"v": session.view(topic)})

    @app.post("/api/suggest")
    def suggest(body: Round):
        return {"count": session.suggest(body.topic, body.pairs)}

    @app.post("/api/topic/suggest")
    def suggest_topics(body: Topic):
        return {"names": session.suggest_topics(body.topic)}

    @app.post("/api/choose")
    def choose(body: Choice):
        session.choose(body.model, body.generator)
        return {"model": session.driving.model_id, "generator": session.generator_name}

    @app.post("/api/accept")
    def accept(body: Suggestion):
        return {"id": session.accept(body.topic, body.sid, body.verdict, body.text)}

    @app.post("/api/preview")
    def preview(body: Text):
        models = session.preview(body.topic, body.text)
        return {"models": models,
                "html": templates.get_template("_cells.html").render(models=models)}

    @app.post("/api/add")
    def add(body: Text):
        return {"id": session.add_test(body.topic, body.text, body.verdict)}

    @app.post("/api/expect")
    def expect(body: Row):
        session.set_expected(body.id, body.label)
        return {}

    @app.post("/api/move")
    def move(body: Row):
        session.move(body.id, body.topic)
        return {}

    @app.post("/api/delete")
    def delete(body: Row):
        session.delete(body.id)
        return {}

    @app.post("/api/topic/create")
    def create_topic(body: Name):
        return {"topic": session.create_topic(body.topic, body.name)}

    @app.post("/api/topic/rename")
    def rename_topic(body: Name):
        return {"topic": session.rename_topic(body.topic, body.name)}

    @app.post("/api/topic/delete")
    def delete_topic(body: Topic):
        session.delete_topic(body.topic)
        return {"topic": body.topic.rsplit("/", 1)[0]}

    @app.post("/api/undo")
    def undo():
        return {"undone": session.undo()}

    return app


def bind(port: int | None) -> socket.socket:
    """A listening socket on 127.0.0.1 (``port`` None: a free one); a port in use is one
    error naming it and the fix."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port or 0))
    except OSError as exc:
        sock.close()
        raise LingtestError(f"lingtest review --port {port}: cannot listen on {HOST}:{port} "
                            f"({exc.strerror}); pick another --port, or leave --port out for "
                            "a free one") from None
    sock.listen(64)
    return sock


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def serve(session: ReviewSession, sock: socket.socket, announce=print) -> None:
    """Serve the app on ``sock`` until interrupted: Ctrl-C or SIGTERM, both ending in
    ``KeyboardInterrupt`` once uvicorn has shut down (it re-raises the signal it caught),
    so the caller closes the session's flow run either way."""
    import signal

    import uvicorn

    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(session), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    announce(f"lingtest review: {session.path} at http://{HOST}:{port}/ (Ctrl-C stops)")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
