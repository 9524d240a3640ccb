"""Drive a running kvstore server with a mix of GET and SET requests and report latency."""

import argparse
import asyncio
import random
import statistics
import time

from kvstore.protocol import FrameReader, Opcode, encode_frame


async def worker(host, port, requests, key_space, value_size, read_ratio, latencies, seed):
    rng = random.Random(seed)
    reader, writer = await asyncio.open_connection(host, port)
    frames = FrameReader()
    value = b"x" * value_size
    for _ in range(requests):
        key = f"key-{rng.randrange(key_space)}".encode()
        if rng.random() < read_ratio:
            request = encode_frame(Opcode.GET, key)
        else:
            request = encode_frame(Opcode.SET, key, value)
        started = time.perf_counter()
        writer.write(request)
        await writer.drain()
        replies = []
        while not replies:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            replies = frames.feed(data)
        latencies.append(time.perf_counter() - started)
    writer.close()


async def main(args):
    latencies = []
    started = time.perf_counter()
    await asyncio.gather(*[
        worker(args.host, args.port, args.requests, args.keys, args.value_size,
               args.read_ratio, latencies, seed)
        for seed in range(args.connections)
    ])
    elapsed = time.perf_counter() - started
    latencies.sort()
    print(f"requests: {len(latencies)} in {elapsed:.2f}s ({len(latencies) / elapsed:.0f}/s)")
    print(f"p50 {statistics.median(latencies) * 1e3:.3f} ms")
    print(f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7379)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--value-size", type=int, default=128)
    parser.add_argument("--read-ratio", type=float, default=0.9)
    asyncio.run(main(parser.parse_args()))
