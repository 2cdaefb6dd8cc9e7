"""What the adapters in tools/ share: GradBench's protocol loop (stdin/stdout JSON lines) and
its number formats. Standard library only; each adapter puts this folder on sys.path."""

import json
import math
import sys
import time


def number(x):
    """A protocol number: JSON numbers, or the strings "inf", "-inf", "nan" adgauge sends."""
    if isinstance(x, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[x]
    return float(x)


def plain(xs):
    """JSON-safe numbers (from a list or anything with .tolist()): non-finite values as the
    strings adgauge reads."""
    out = []
    for x in xs.tolist() if hasattr(xs, "tolist") else xs:
        if math.isnan(x):
            out.append("nan")
        elif math.isinf(x):
            out.append("inf" if x > 0 else "-inf")
        else:
            out.append(x)
    return out


def serve(tool, config, modules):
    """Answers the protocol until stdin closes. `modules[name](function, input)` prepares a
    function on its input (converted once, outside the timed runs, as GradBench's tools do) and
    returns (run, output): `run()` computes and waits for the result, `output(result)` makes it
    JSON. Each run is timed alone (one timing per run); the last result is the output. Any
    exception is the tool's answer (`success: false` with the reason), never a crash."""
    for line in sys.stdin:
        message = json.loads(line)
        kind, mid = message["kind"], message["id"]
        response = {"id": mid}
        if kind == "start":
            response.update(tool=tool, config=config)
        elif kind == "define":
            response["success"] = message["module"] in modules
            if not response["success"]:
                response["error"] = f"{tool} has no module {message['module']}"
        elif kind == "evaluate":
            x = message.get("input")
            # An input that is not an object (GradBench's hello: a bare number) has no run
            # settings: one run.
            runs, min_seconds = 1, 0.0
            if isinstance(x, dict):
                x = dict(x)
                runs = max(1, int(x.pop("min_runs", 1)))
                min_seconds = float(x.pop("min_seconds", 0))
            timings = []
            try:
                run, output = modules[message["module"]](message["function"], x)
                start_all = time.perf_counter()
                while len(timings) < runs or time.perf_counter() - start_all < min_seconds:
                    start = time.perf_counter_ns()
                    result = run()
                    timings.append({"name": "evaluate", "nanoseconds": time.perf_counter_ns() - start})
                response.update(success=True, output=output(result), timings=timings)
            except Exception as e:  # noqa: BLE001 - every failure is an answer
                response.update(success=False, error=f"{type(e).__name__}: {e}")
        print(json.dumps(response), flush=True)
