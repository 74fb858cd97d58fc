#!/usr/bin/env bash
# hostbuf-on-gpu-host.sh — tensord-bench P3 same host on the GPU host (issue 17 item 1,
# issue 12 item 3): 64 MiB and 1 GiB uploads and downloads through a tensord on a unix
# socket, from and into td_host_alloc buffers (one copy by the server), from plain memory
# (the region's slots), and over the unix gRPC stream, next to a memcpy of the same bytes;
# tensors on cuda:0, then on cpu (16 cores there). Needs carry/ from
# tests/gpu/prepare-carry.sh. Run on the GPU host from the repository root:
#     OUT=$OUT bash tests/gpu/hostbuf-on-gpu-host.sh
# Results in $OUT: hostbuf.md (the tables), hostbuf.log (stderr). Bounded by $BUDGET s
# (default 150).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-hostbuf-out}
mkdir -p "$OUT"
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { echo "cannot unpack the carry" >&2; exit 1; }
use_carry "$X"
BUDGET=${BUDGET:-150}
rc=0
for dev in cuda:0 cpu; do
    echo "### P3 same host, tensors on $dev" >>"$OUT/hostbuf.md"
    timeout "$((BUDGET / 2))" "$X/bin/tensord-bench" --only P3 --device "$dev" \
        --tensord "$X/bin/tensord" >>"$OUT/hostbuf.md" 2>>"$OUT/hostbuf.log" || rc=$?
done
grep -E "same host|id \|" "$OUT/hostbuf.md"
tail -5 "$OUT/hostbuf.log"
exit $rc
