#!/usr/bin/env bash
# Builds the busybox of podflow's busybox images from Debian's source
# package, statically against musl: `make busybox` runs it.
#
#   images/busybox/build.sh VERSION WORKDIR OUT
#
# VERSION is the Debian source version (e.g. 1:1.37.0-6, of trixie),
# WORKDIR a directory of its own (.tools/busybox), OUT the binary to write.
#
# Why not Debian's busybox-static: it links glibc statically, and glibc's
# getaddrinfo loads its name services at run time. In a container of
# busybox alone there are none, so `wget http://my-svc/`, `nc my-svc 80`
# or `ping my-svc` cannot resolve a name; next to another glibc's (the
# host's) the lookup crashes (SIGFPE). Bookworm's 1.35 also lacks wget's
# -T, and `wget -T 1 …` segfaults. musl resolves names itself, from
# /etc/hosts and /etc/resolv.conf.
#
# What it does: apt (with an index of its own under WORKDIR, the machine's
# Debian archive as its source, apt's signature checks) downloads the
# source package; dpkg-source unpacks it, with Debian's patches less the
# two that drop oddly named environment variables (below); the build
# takes Debian's static configuration, less the two options that need
# glibc's GNU regex API (CONFIG_EXTRA_COMPAT, CONFIG_FEATURE_VI_REGEX_SEARCH)
# and the two that make the shell prefer its applets to what PATH finds
# (CONFIG_FEATURE_PREFER_APPLETS, CONFIG_FEATURE_SH_STANDALONE),
# and compiles with musl-gcc (Debian's musl-tools), the kernel headers of
# linux-libc-dev beside musl's. Nothing is installed but those Debian
# packages when missing. The result must answer `wget -T 1` on a closed
# loopback port with a refusal (exit 1), not a crash, and `sh -c env` must
# print a variable named data-1.
set -euo pipefail

version=$1 work=$2 out=$3
mkdir -p "$work"
work=$(cd "$work" && pwd)

need=()
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v dpkg-source >/dev/null || need+=(dpkg-dev)
command -v bzip2 >/dev/null || need+=(bzip2)
command -v xz >/dev/null || need+=(xz-utils)
command -v make >/dev/null || need+=(make)
command -v patch >/dev/null || need+=(patch)
[ -e /usr/include/linux/version.h ] || need+=(linux-libc-dev)
if ((${#need[@]})); then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# The machine's Debian archive (the first source of plain Packages), as the
# source of trixie's source packages.
uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(IDENTIFIER)' |
	awk '$2 !~ /-(security|updates)$/ && $3 == "Packages" {print $1; exit}')
if [ -z "$uri" ]; then
	echo "busybox: no Debian archive in apt's sources (run apt-get update)" >&2
	exit 1
fi
apt="$work/apt"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/parts"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" >"$apt/sources.list"
opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::Etc::Parts=$apt/parts"
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
apt-get "${opts[@]}" update >/dev/null
src="$work/src"
rm -rf "$src" && mkdir -p "$src"
if ! (cd "$src" && apt-get "${opts[@]}" source --download-only "busybox=$version" >/dev/null); then
	echo "busybox: Debian trixie has no busybox source $version any more: set BUSYBOX_VERSION (apt-cache showsrc busybox)" >&2
	exit 1
fi
(cd "$src" && dpkg-source -x --no-check --skip-patches ./*.dsc tree >/dev/null)

# Debian's patches, less two: Debian reverts upstream's 9c143ce52 ("ash:
# retain envvars with bad names in initial environment", busybox 1.28) for
# debian-installer, so its ash drops every variable whose name is not a
# shell identifier (data-1, a ConfigMap key) from what it passes on: `sh -c
# env` does not print it. Upstream's busybox (the Kubernetes e2e image's)
# passes them on unchanged; so does podflow's.
skip=" revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch temp-deb-installer-hack.patch "
while read -r p _; do
	case "$p" in "" | "#"*) continue ;; esac
	[[ "$skip" == *" $p "* ]] && continue
	patch -d "$src/tree" -p1 -s -N <"$src/tree/debian/patches/$p"
done <"$src/tree/debian/patches/series"

# Kernel headers beside musl's own (musl-gcc leaves /usr/include out).
kh="$work/kernel-headers"
mkdir -p "$kh"
for d in linux asm-generic mtd; do ln -sfn "/usr/include/$d" "$kh/$d"; done
ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$kh/asm"

cd "$src/tree"
cp debian/config/pkg/static .config
sed -i -e 's/^CONFIG_EXTRA_COMPAT=y/# CONFIG_EXTRA_COMPAT is not set/' \
	-e 's/^CONFIG_FEATURE_VI_REGEX_SEARCH=y/# CONFIG_FEATURE_VI_REGEX_SEARCH is not set/' \
	-e 's/^CONFIG_FEATURE_PREFER_APPLETS=y/# CONFIG_FEATURE_PREFER_APPLETS is not set/' \
	-e 's/^CONFIG_FEATURE_SH_STANDALONE=y/# CONFIG_FEATURE_SH_STANDALONE is not set/' \
	-e '/FEATURE_DI_ENV_HACK/d' .config
cc="musl-gcc -isystem $kh"
export KCONFIG_NOTIMESTAMP=1
make CC="$cc" oldconfig < <(yes "") >/dev/null
make -j"$(nproc)" CC="$cc" BB_EXTRA_VERSION="Debian ${version#*:}, musl, for podflow" busybox >"$work/build.log" 2>&1 ||
	{ tail -30 "$work/build.log" >&2; exit 1; }

rc=0
./busybox wget -T 1 -q -O /dev/null http://127.0.0.1:1/ 2>/dev/null || rc=$?
if [ "$rc" -ne 1 ]; then
	echo "busybox: wget -T on a closed port exited $rc (want 1, connection refused)" >&2
	exit 1
fi
# The shell runs what PATH finds, as upstream's busybox (its defconfig):
# Debian's static configuration prefers its own applets (a rescue shell),
# so in an image with another nc in /usr/bin, `sh -c 'nc …'` ran busybox's.
bin=$(mktemp -d)
printf '#!/bin/sh\necho nc-from-path\n' >"$bin/nc" && chmod +x "$bin/nc"
got=$(env -i PATH="$bin" ./busybox sh -c nc 2>&1 || true)
rm -rf "$bin"
if [ "$got" != nc-from-path ]; then
	echo "busybox: sh -c nc ran $got, not the nc PATH finds (FEATURE_PREFER_APPLETS, FEATURE_SH_STANDALONE)" >&2
	exit 1
fi
if [ "$(env -i 'data-1=value-1' ./busybox sh -c env | grep -c '^data-1=value-1$')" != 1 ]; then
	echo "busybox: sh -c env does not print a variable named data-1 (ash drops names that are not identifiers)" >&2
	exit 1
fi
install -m 0755 busybox "$out.tmp"
mv "$out.tmp" "$out"
echo "busybox: $("$out" | head -1)"
