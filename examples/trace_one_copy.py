"""Trace one pageable host-to-device copy with torch.profiler and write a trace that
Perfetto (https://ui.perfetto.dev) or chrome://tracing opens: the host's staging work and
the copy engine's transfers on one time axis. Run: python trace_one_copy.py [out.json]"""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

if not torch.cuda.is_available():
    sys.exit("trace_one_copy.py needs a CUDA GPU: there is nothing to trace on this machine")
out = sys.argv[1] if len(sys.argv) > 1 else "copy_trace.json"
x = torch.ones(256 * 2**20, dtype=torch.uint8)  # 256 MiB of ordinary (pageable) memory
torch.zeros(1, device="cuda")  # start CUDA outside the trace
x.to("cuda")  # warm-up copy: device allocation and first touch happen here
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    y = x.to("cuda")
    torch.cuda.synchronize()
prof.export_chrome_trace(out)
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
print(f"wrote {out}: open it in https://ui.perfetto.dev or chrome://tracing")
