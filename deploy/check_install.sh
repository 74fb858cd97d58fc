#!/usr/bin/env bash
# check_install.sh BUILD_DIR — README "Deployment": `meson install` puts tensord, tensorctl
# and the examples fashion-mnist and fortune-lm in <prefix>/bin, and the ones that use
# libtensord find it through their RUNPATH (<prefix>/<libdir>), so no ldconfig step is
# needed. Installs the build into a temporary DESTDIR (nothing outside it is touched) and
# checks, for each program: it is there, its RUNPATH names <prefix>/<libdir> (as it will be
# on the target, without the DESTDIR), and libtensord.so.0 was installed there and loads
# for it (ldd with that directory inside the DESTDIR).
set -u -o pipefail
build=$1
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail=0
if ! meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$dest.log" 2>&1; then
    echo "FAIL: meson install into a DESTDIR: $(tail -3 "$dest.log")"
    rm -f "$dest.log"
    exit 1
fi
rm -f "$dest.log"
prefix=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o["prefix"]); print(o["prefix"] + "/" + o["libdir"] if not o["libdir"].startswith("/") else o["libdir"]); print(o["bindir"])')
pfx=$(echo "$prefix" | sed -n 1p)
libdir=$(echo "$prefix" | sed -n 2p)
bindir=$(echo "$prefix" | sed -n 3p)
case $bindir in /*) ;; *) bindir=$pfx/$bindir ;; esac
for p in tensord tensorctl fashion-mnist fortune-lm; do
    f=$dest$bindir/$p
    if [ ! -x "$f" ]; then
        echo "FAIL: $p not installed in $bindir"; fail=1; continue
    fi
    if ! readelf -d "$f" | grep -q 'libtensord.so'; then
        echo "ok: $p installed (does not use libtensord)"; continue
    fi
    rp=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
    if [ "$rp" != "$libdir" ]; then
        echo "FAIL: $p RUNPATH '$rp', want '$libdir'"; fail=1; continue
    fi
    # the loader, with the RUNPATH's directory found inside the DESTDIR
    got=$(env -u LD_LIBRARY_PATH LD_LIBRARY_PATH="$dest$libdir" ldd "$f" | awk '$1 == "libtensord.so.0" {print $3}')
    if [ "$got" != "$dest$libdir/libtensord.so.0" ]; then
        echo "FAIL: $p resolves libtensord.so.0 to '$got'"; fail=1; continue
    fi
    echo "ok: $p installed, RUNPATH $rp, libtensord.so.0 from it"
done
exit $fail
