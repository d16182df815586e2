"""Reading Triton's metrics text: the GPU memory its models' instances report."""

from __future__ import annotations

from embedgate.api.telemetry.scrape import gpu_memory_by_model

TRITON_TEXT = b"""# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 12
# HELP embedgate_gpu_memory_bytes GPU memory of a model instance
# TYPE embedgate_gpu_memory_bytes gauge
embedgate_gpu_memory_bytes{instance="m_0_0",model="m",part="total"} 840957952
embedgate_gpu_memory_bytes{instance="m_0_0",model="m",part="weights"} 45434624
embedgate_gpu_memory_bytes{instance="m_0_1",model="m",part="total"} 840957952
embedgate_gpu_memory_bytes{instance="m_0_1",model="m",part="weights"} 45434624
embedgate_gpu_memory_bytes{instance="c_text_encoder_0_0",model="c_text_encoder",part="total"} 1000
"""


def test_each_models_instances_totals_are_summed():
    assert gpu_memory_by_model(TRITON_TEXT) == {"m": 2 * 840957952, "c_text_encoder": 1000}


def test_a_triton_without_gpu_instances_reports_none():
    assert gpu_memory_by_model(b'nv_inference_count{model="m",version="1"} 12\n') == {}
