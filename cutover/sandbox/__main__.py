"""python -m cutover.sandbox up|down|status|restart --state-dir D --cutover-root R --port P --ranks N [--device]

``serve`` and ``rank`` are internal: the daemon runs them. Exit 0 on success, 1 with a message on failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from cutover.errors import CutoverError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cutover.sandbox",
                                     description="The cutover sandbox: a labelled stand-in for an SGLang server.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("up", "start the sandbox (no-op when the same one is healthy)"),
                            ("restart", "stop, then start the sandbox"),
                            ("serve", "run the server in the foreground (used by up)")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--state-dir", required=True)
        cmd.add_argument("--cutover-root", required=True)
        cmd.add_argument("--port", type=int, required=True)
        cmd.add_argument("--ranks", type=int, required=True)
        cmd.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
        cmd.add_argument("--host", default="127.0.0.1")
        cmd.add_argument("--layers", type=int, default=6)
        cmd.add_argument("--step-interval", type=float, default=0.1, help="seconds between verify steps per rank")
        cmd.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for /health")
    for name, help_text in (("down", "stop the sandbox"), ("status", "print the sandbox's state as JSON")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--state-dir", required=True)
        for ignored in ("--cutover-root", "--port", "--ranks", "--device"):
            cmd.add_argument(ignored, help="accepted for a uniform command line; not needed")
    rank = sub.add_parser("rank", help="one rank process (used by serve)")
    rank.add_argument("--rank", type=int, required=True)
    rank.add_argument("--device", required=True)
    rank.add_argument("--layers", type=int, required=True)
    rank.add_argument("--step-interval", type=float, required=True)
    rank.add_argument("--state-dir", required=True)
    return parser


def _config(args):
    from cutover.sandbox.server import ServerConfig

    if args.ranks < 1 or args.layers < 1:
        raise CutoverError(f"--ranks and --layers must be >= 1 (got {args.ranks}, {args.layers})")
    return ServerConfig(state_dir=os.path.abspath(args.state_dir), cutover_root=os.path.abspath(args.cutover_root),
                        port=args.port, ranks=args.ranks,
                        device=args.device, host=args.host, layers=args.layers, step_interval_s=args.step_interval)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.command in ("serve", "rank") else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        if args.command == "rank":
            from cutover.sandbox.rank import run_rank

            return run_rank(args.rank, args.device, args.layers, args.step_interval, args.state_dir)
        from cutover.sandbox import daemon

        if args.command == "serve":
            from cutover.sandbox.server import SandboxServer

            return SandboxServer(_config(args)).serve()
        if args.command == "up":
            print(daemon.up(_config(args), args.timeout))
        elif args.command == "restart":
            print(daemon.restart(_config(args), args.timeout))
        elif args.command == "down":
            print(daemon.down(os.path.abspath(args.state_dir)))
        else:
            print(json.dumps(daemon.status(os.path.abspath(args.state_dir)), indent=2, sort_keys=True))
        return 0
    except CutoverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
