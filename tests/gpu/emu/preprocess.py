#!/usr/bin/env python3
"""preprocess.py SRC DST — rewrite CUDA launches `K<<<cfg>>>(args);` in SRC into
`td_emu_launch_s(SYNC, "K", [&]{ K(args); }, cfg);` for the CPU emulation (kernel_emu.hpp).
SYNC is true when K's body, or the body of a function it names, calls __syncthreads or a
warp shuffle (its threads then run as fibers)."""
import re
import sys


def bodies(src):
    """{function name: body text} for every function definition with a brace body."""
    out = {}
    src = re.sub(r'/\*.*?\*/', ' ', src, flags=re.S)
    src = re.sub(r'//[^\n]*', ' ', src)
    src = re.sub(r'__launch_bounds__\s*\([^)]*\)', '', src)
    for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)\s*\([^;{}]*\)\s*(?:const\s*)?\{', src):
        name = m.group(1)
        if name in ('if', 'for', 'while', 'switch', 'return', 'sizeof'):
            continue
        b0 = m.end() - 1
        depth, i = 0, b0
        while i < len(src):
            if src[i] == '{':
                depth += 1
            elif src[i] == '}':
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out[name] = out.get(name, '') + src[b0:i + 1]
    return out


# Calls that need the block's threads as fibers: barriers, warp shuffles, and gpu_ops.cuh's
# helpers that use them (their bodies are in a header this script does not read).
SYNC_CALLS = r'\b(__syncthreads|__shfl_\w+|td_shfl_\w+|td_team_sum)\b'


def syncing(src):
    """Names of functions whose body calls __syncthreads, directly or through functions of
    this file (to a fixed point)."""
    b = bodies(src)
    sync = {n for n, t in b.items() if re.search(SYNC_CALLS, t)}
    while True:
        more = {n for n, t in b.items() if n not in sync and
                any(re.search(r'\b%s\b' % re.escape(f), t) for f in sync)}
        if not more:
            return sync
        sync |= more

def kernel_start(s, i):
    """Index where the kernel expression ending just before s[i] begins."""
    j = i
    if s[j - 1] == '>':  # template arguments
        depth = 0
        j -= 1
        while True:
            if s[j] == '>':
                depth += 1
            elif s[j] == '<':
                depth -= 1
                if depth == 0:
                    break
            j -= 1
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] in '_:'):
        j -= 1
    return j

def matching(s, i, open_c, close_c):
    depth = 0
    while True:
        if s[i] == open_c:
            depth += 1
        elif s[i] == close_c:
            depth -= 1
            if depth == 0:
                return i
        i += 1

def main():
    src = open(sys.argv[1]).read()
    sync = syncing(src)
    out = []
    pos = 0
    while True:
        i = src.find('<<<', pos)
        if i < 0:
            out.append(src[pos:])
            break
        k0 = kernel_start(src, i)
        kernel = src[k0:i]
        c1 = src.index('>>>', i)
        cfg = src[i + 3:c1]
        a0 = src.index('(', c1)
        a1 = matching(src, a0, '(', ')')
        args = src[a0 + 1:a1]
        out.append(src[pos:k0])
        name = ' '.join(kernel.split())
        base = name.split('<')[0].split('::')[-1].strip()
        out.append('td_emu_launch_s(%s, "%s", [&] { %s(%s); }, %s)' %
                   ('true' if base in sync else 'false', name, kernel, args, cfg))
        pos = a1 + 1
    open(sys.argv[2], 'w').write(''.join(out))

main()
