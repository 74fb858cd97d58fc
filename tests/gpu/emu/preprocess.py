#!/usr/bin/env python3
"""preprocess.py SRC DST — rewrite CUDA launches `K<<<cfg>>>(args);` in SRC into
`td_emu_launch("K", [&]{ K(args); }, cfg);` for the CPU emulation (kernel_emu.hpp)."""
import sys

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
        out.append('td_emu_launch("%s", [&] { %s(%s); }, %s)' % (name, kernel, args, cfg))
        pos = a1 + 1
    open(sys.argv[2], 'w').write(''.join(out))

main()
