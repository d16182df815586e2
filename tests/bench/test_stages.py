"""benchmark.py --profile: a sample's stage is the innermost frame a rule knows, py-spy's raw
output counted by stage, and each process's CPU split by its samples."""

from collections import Counter

import pytest

from embedgate.bench import stages
from embedgate.bench.processes import ProcessSample

RAW = """\
<module> (api/__main__.py:5);run (uvicorn/main.py:632);_run_once (asyncio/base_events.py:1922) 40
<module> (api/__main__.py:5);handle (uvicorn/protocols/http/httptools_impl.py:400);app (api/http/middleware.py:60);\
app (fastapi/routing.py:300);__call__ (api/endpoints/envelope.py:120);run (api/compute/service.py:100) 7
_worker (concurrent/futures/thread.py:81);encode (/work/x/contract/preprocess/text.py:50) 12
render (api/http/responses.py:14) 3
_read (api/triton/stream.py:97);__aiter__ (grpc/aio/_call.py:300) 5
TritonPythonModel.execute (/repo/m/1/model.py:200);Session.run (onnxruntime/capi/onnxruntime_inference_collection.py:220) 20
TritonPythonModel.execute (/repo/m/1/model.py:200);plan_sub_batches (/repo/m/1/batch_layout.py:80) 2
TritonPythonModel.execute (/repo/m/1/model.py:200) 4
PartThreads._work (/repo/m/1/batch_layout.py:222) 1
PartThreads._work (/repo/m/1/batch_layout.py:222);TritonPythonModel._run_packed (/repo/m/1/model.py:270) 3
validate (pydantic/main.py:700) 1
strange (somewhere/else.py:1) 2
"""


def test_a_sample_is_the_stage_of_its_innermost_known_frame():
    counted = stages.parse_raw(RAW)
    assert counted == Counter({
        "event loop": 40, "batching and plan": 7, "tokenizing": 12, "answer": 3, "triton call": 5,
        "stub: model": 20, "stub: batch layout": 5, "stub: exchange": 5, "validation": 1, "other": 2,
    })


def sample(pid: int, name: str, cpu_s: float) -> ProcessSample:
    return ProcessSample(pid, name, 0, cpu_s, "pss")


def test_each_process_cpu_is_split_by_its_samples_and_tritonserver_is_its_own():
    before = [sample(1, "python", 10.0), sample(2, "tritonserver", 5.0), sample(3, "triton_python_ba", 1.0)]
    after = [sample(1, "python", 12.0), sample(2, "tritonserver", 5.5), sample(3, "triton_python_ba", 2.0)]
    samples = {1: Counter({"validation": 3, "tokenizing": 1}), 3: Counter({"stub: model": 1})}
    per_request = stages.cpu_per_stage(samples, before, after, requests=100)
    assert per_request == pytest.approx(
        {"validation": 15.0, "tokenizing": 5.0, "stub: model": 10.0, stages.TRITONSERVER: 5.0}
    )
