#!/bin/sh
# Builds the C# library and its harness with Mono's mcs: ./build.sh [OUTPUT_DIRECTORY] (default: build).
# mcs accepts language versions up to 7.2 (a subset of the C# 7.3 that Unity and Godot .NET take).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/build"}
mkdir -p "$out"
flags="-langversion:7.2 -warnaserror+ -nowarn:1591 -debug- -optimize+ -r:System.Numerics.dll"
# shellcheck disable=SC2046,SC2086  # the file lists and flags are meant to split
mcs $flags -target:library -doc:"$out/GymRemote.xml" -out:"$out/GymRemote.dll" $(find "$here/src" -name '*.cs' | sort)
# shellcheck disable=SC2046,SC2086
mcs $flags -target:exe -r:"$out/GymRemote.dll" -out:"$out/GymRemote.Harness.exe" $(find "$here/harness" -name '*.cs' | sort)
# shellcheck disable=SC2046,SC2086
mcs $flags -target:exe -r:"$out/GymRemote.dll" -r:Mono.Posix.dll -out:"$out/GymRemote.Client.exe" $(find "$here/cli" -name '*.cs' | sort)
