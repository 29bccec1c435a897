#!/usr/bin/env bash
# Builds the Java client's jar, build/leased-client-0.1.0.jar, and its sources jar, from Debian's
# packages (no Maven, which needs Maven Central): protoc and the grpc-java plugin generate the
# stubs from proto/lease/v1/lease.proto into build/gen, javac compiles them and src/main/java for
# Java 17 against the jars in /usr/share/java (jars.sh), and jar packs the classes, the proto
# (lease/v1/lease.proto) and a manifest naming the module. Warnings in the client's own code fail
# the build; the generated code's are not ours. Installs what is missing (as root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/jars.sh"
install_missing "${build_packages[@]}"

version=0.1.0
build="$here/build"
rm -rf "$build"
mkdir -p "$build/gen" "$build/classes/lease/v1"
# The JIT's first tier only: javac runs for seconds, too short for the second to pay off.
javac=(javac -J-XX:TieredStopAtLevel=1 --release 17 -encoding UTF-8)

protoc -I "$repo/proto" \
  --java_out="$build/gen" \
  --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin --grpc-java_out="$build/gen" \
  lease/v1/lease.proto
"${javac[@]}" -nowarn -d "$build/classes" -cp "$dependency_classpath" \
  $(find "$build/gen" -name '*.java')
"${javac[@]}" -Xlint:all -Werror -d "$build/classes" -cp "$build/classes:$dependency_classpath" \
  $(find "$here/src/main/java" -name '*.java')
# The contract travels with the classes, for tools that read it (grpcurl -proto, other stubs).
cp "$repo/proto/lease/v1/lease.proto" "$build/classes/lease/v1/"

cat >"$build/MANIFEST.MF" <<MANIFEST
Automatic-Module-Name: leased.client
Implementation-Title: leased-client
Implementation-Version: $version
MANIFEST
jar --create --file "$build/leased-client-$version.jar" --manifest "$build/MANIFEST.MF" \
  -C "$build/classes" . &
jar --create --file "$build/leased-client-$version-sources.jar" \
  -C "$here/src/main/java" . -C "$build/gen" . -C "$repo/proto" lease/v1/lease.proto &
wait %1 && wait %2
