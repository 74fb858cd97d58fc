#!/bin/sh
# make_certs.sh DIR — throwaway test PKI, made at test time (no private key is checked in):
#   ca.pem/ca.key           test CA
#   other-ca.pem            a second, unrelated CA
#   server.pem/server.key   signed by ca, CN=localhost, SAN localhost + 127.0.0.1 + ::1
#   client.pem/client.key   signed by ca, CN=alice-cert
#   other-client.pem/.key   signed by other-ca, CN=alice-cert
#   expired.pem             server.key's certificate, already expired
set -eu
d=$1
mkdir -p "$d"
cd "$d"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=tensord test $1" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        2>/dev/null
}
leaf() { # name ca cn days ext
    [ -f "$1.key" ] || key "$1.key"
    openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$3" 2>/dev/null
    printf '%s\n' "$5" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
        -days "$4" -extfile "$1.ext" 2>/dev/null
}
ca ca
ca other-ca
srv='subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1
extendedKeyUsage=serverAuth'
cli='extendedKeyUsage=clientAuth'
leaf server ca localhost 2 "$srv"
leaf client ca alice-cert 2 "$cli"
leaf other-client other-ca alice-cert 2 "$cli"
cp server.key expired.key
leaf expired ca localhost -1 "$srv"
rm -f ./*.csr ./*.ext ./*.srl
