"""Device idle after each host sync in a torch.profiler trace (`CostParams.host_sync_s`): the first gap, and every gap until a kernel
is found already queued (launched before the previous kernel ended: the host is ahead again).

    python benchmarks/host_sync_gap.py tests/data/traces/h200_moe1b/trace_moe-1b.json.gz
"""
import gzip, json, statistics as st, bisect, sys
d = json.load(gzip.open(sys.argv[1]))
ev = d['traceEvents']
launch = {e['args']['correlation']: e['ts'] for e in ev if e.get('cat') == 'cuda_runtime' and 'correlation' in e.get('args', {})}
k = sorted((e['ts'], e['ts'] + e.get('dur', 0), launch.get(e['args'].get('correlation'))) for e in ev if e.get('cat') == 'kernel')
ks = [a for a, _, _ in k]
first, chain, nk = [], [], []
for s in ev:
    if s.get('cat') != 'cuda_runtime' or s['name'] not in ('cudaStreamSynchronize', 'cudaMemcpyAsync') or s['dur'] <= 15:
        continue
    end = s['ts'] + s['dur']
    i = bisect.bisect_left(ks, end)
    if i == 0 or i >= len(k) or max(b for _, b, _ in k[max(0, i - 50):i]) < end - 15:
        continue  # the host did not wait for the device
    idle, prev_end, j = k[i][0] - end, k[i][1], i + 1
    while j < len(k) and k[j][2] is not None and k[j][2] > prev_end:  # launched after the device went idle
        idle += max(0.0, k[j][0] - prev_end); prev_end = max(prev_end, k[j][1]); j += 1
    first.append(k[i][0] - end); chain.append(idle); nk.append(j - i)
print(f"syncs the host waited at: {len(first)}; first gap median {st.median(first):.1f} us; "
      f"idle until the host is ahead again median {st.median(chain):.1f} us (mean {st.mean(chain):.1f}) over a median {st.median(nk)} kernels")
