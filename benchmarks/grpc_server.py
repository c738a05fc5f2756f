"""Which gRPC server for the proxy: grpcio bridged to the Twisted reactor, or h2 on the reactor itself.

    python benchmarks/grpc_server.py [--calls 4000] [--concurrency 32]

Each server runs in a process of its own and serves two methods: a unary echo of a ~1 KB message and a
server stream of 3 such messages. A grpcio client in this process drives N concurrent calls of each and
prints, per server: server CPU per call (the server process's ``time.process_time`` over the calls), and
the p50/p99 latency seen by the client.

(a) grpcio: ``grpc.aio`` server on an asyncio loop in its own thread; each handler hops to the reactor
    thread (``reactor.callFromThread``) and back, as every broker call must run on the reactor.
(b) h2: :mod:`gateway.proxy.grpc` on the reactor; handlers run there directly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gateway.proxy.v2 import definition_pb2 as pb

ECHO = "/bench.Bench/Echo"
STREAM = "/bench.Bench/Stream"
CPU = "/bench.Bench/Cpu"
STREAM_MESSAGES = 3


def cpu_status(_request: pb.Status) -> pb.Status:
    return pb.Status(message=repr(time.process_time()))


def serve_h2() -> None:
    from twisted.internet import reactor

    from gateway.proxy.grpc import GrpcServerFactory, Kind, Method

    def stream(call, request):
        for _ in range(STREAM_MESSAGES):
            call.send(request)
        call.finish()

    methods = {
        ECHO: Method(Kind.UNARY, pb.Status, lambda call, request: request),
        STREAM: Method(Kind.SERVER_STREAM, pb.Status, stream),
        CPU: Method(Kind.UNARY, pb.Status, lambda call, request: cpu_status(request)),
    }
    port = reactor.listenTCP(0, GrpcServerFactory(methods), interface="127.0.0.1")
    print(port.getHost().port, flush=True)
    reactor.run()


def serve_grpcio() -> None:
    import asyncio

    import grpc
    from twisted.internet import reactor

    def on_reactor(fn, *args):
        """Run fn on the reactor thread; an awaitable of its result on the asyncio loop."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def run():
            result = fn(*args)
            loop.call_soon_threadsafe(fut.set_result, result)

        reactor.callFromThread(run)
        return fut

    async def echo(request, context):
        return await on_reactor(lambda r: r, request)

    async def stream(request, context):
        for _ in range(STREAM_MESSAGES):
            yield await on_reactor(lambda r: r, request)

    async def cpu(request, context):
        return cpu_status(request)

    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo, pb.Status.FromString, pb.Status.SerializeToString),
        "Stream": grpc.unary_stream_rpc_method_handler(stream, pb.Status.FromString, pb.Status.SerializeToString),
        "Cpu": grpc.unary_unary_rpc_method_handler(cpu, pb.Status.FromString, pb.Status.SerializeToString),
    }

    async def main():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("bench.Bench", handlers)])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    reactor.run(installSignalHandlers=False)


def measure(port: int, calls: int, concurrency: int) -> dict[str, float]:
    import grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    echo = channel.unary_unary(ECHO, pb.Status.SerializeToString, pb.Status.FromString)
    stream = channel.unary_stream(STREAM, pb.Status.SerializeToString, pb.Status.FromString)
    cpu = channel.unary_unary(CPU, pb.Status.SerializeToString, pb.Status.FromString)
    request = pb.Status(code=pb.Code.OK, message="x" * 1000)
    echo(request, timeout=10)  # connected and warm
    out = {}
    for name, fn in (
        ("unary", lambda: echo(request, timeout=10)),
        ("stream", lambda: list(stream(request, timeout=10))),
    ):
        latencies: list[float] = []

        def one(_: int, fn=fn, latencies=latencies) -> None:
            t0 = time.perf_counter()
            fn()
            latencies.append(time.perf_counter() - t0)

        cpu0 = float(cpu(pb.Status(), timeout=10).message)
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(calls)))
        cpu1 = float(cpu(pb.Status(), timeout=10).message)
        latencies.sort()
        out[f"{name} server CPU/call (us)"] = (cpu1 - cpu0) / calls * 1e6
        out[f"{name} p50 (ms)"] = statistics.median(latencies) * 1000
        out[f"{name} p99 (ms)"] = latencies[int(len(latencies) * 0.99) - 1] * 1000
    channel.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serve", choices=("h2", "grpcio"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "h2":
        serve_h2()
        return
    if args.serve == "grpcio":
        serve_grpcio()
        return
    for server in ("grpcio", "h2"):
        proc = subprocess.Popen([sys.executable, __file__, "--serve", server], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            figures = measure(port, args.calls, args.concurrency)
        finally:
            proc.kill()
            proc.wait()
        print(f"{server}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
