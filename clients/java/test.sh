#!/usr/bin/env bash
# Builds the Java client and runs its JUnit 5 tests against a real leased on Redis.
#
# Everything comes from Debian 12 packages, no Maven: the stubs are generated with protoc and the
# grpc-java plugin into build/ (never checked in), compiled with javac against the jars in
# /usr/share/java, and the tests run with JUnit's console launcher. Installs what is missing
# (as root). LEASED_BIN: the leased binary to test against; default <repo>/target/debug/leased,
# built with cargo if missing. Arguments select tests instead of all (JUnit's console launcher,
# e.g. --select-method leased.client.GiveUpRaceTest#cancellingWithoutAReleaseLeavesLeasesHeld,
# with LEASED_JAVA_GIVE_UP_CONTROL=1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

packages=(
  protobuf-compiler                   # protoc
  libprotobuf-dev                     # google/protobuf/timestamp.proto, which lease.proto imports
  protobuf-compiler-grpc-java-plugin  # grpc_java_plugin
  libgrpc-java                        # grpc-api, -core, -netty, -stub, -protobuf 1.41
  libprotobuf-java                    # protobuf.jar
  libnetty-java                       # grpc-netty's transport (not a dependency of libgrpc-java)
  libperfmark-java                    # grpc-core's tracing API (idem)
  libgeronimo-annotation-1.3-spec-java # javax.annotation.Generated, which the stubs carry
  libguava-java liberror-prone-java libjsr305-java # grpc's own dependencies, not declared either
  junit5                              # junit-platform-console-standalone
  redis-server
)
missing=()
command -v javac >/dev/null || missing+=(default-jdk-headless) # Java 17 on Debian 12
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ -z ${LEASED_BIN:-} ]]; then
  export LEASED_BIN="$repo/target/debug/leased"
  if [[ ! -x $LEASED_BIN ]]; then
    (cd "$repo" && cargo build --bin leased)
  fi
fi

jars=(grpc-api grpc-core grpc-netty grpc-stub grpc-protobuf grpc-protobuf-lite grpc-context
  protobuf guava netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-common
  netty-handler netty-resolver netty-transport netty-transport-native-unix-common perfmark-api
  error_prone_annotations jsr305 geronimo-annotation-1.3-spec)
classpath=$(printf '/usr/share/java/%s.jar:' "${jars[@]}")

build="$here/build"
rm -rf "$build"
mkdir -p "$build/gen" "$build/classes" "$build/test-classes"
protoc -I "$repo/proto" \
  --java_out="$build/gen" \
  --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin --grpc-java_out="$build/gen" \
  lease/v1/lease.proto
javac -nowarn -d "$build/classes" -cp "$classpath" $(find "$build/gen" -name '*.java')
javac -Xlint:all -Werror -d "$build/classes" -cp "$build/classes:$classpath" \
  $(find "$here/src/main/java" -name '*.java')
javac -Xlint:all,-try -Werror -d "$build/test-classes" \
  -cp "$build/classes:$classpath:/usr/share/java/junit-platform-console-standalone.jar" \
  $(find "$here/src/test/java" -name '*.java')

java -version 2>&1 | head -1
# The example's test starts the example in a JVM of its own, on this class path.
export LEASED_JAVA_CLASSPATH="$build/classes:$classpath"
# Every test, unless the arguments select some.
selection=("$@")
((${#selection[@]})) || selection=(--scan-class-path "$build/test-classes")
java -jar /usr/share/java/junit-platform-console-standalone.jar \
  --class-path "$build/classes:$build/test-classes:$classpath" \
  "${selection[@]}" --disable-banner --disable-ansi-colors --details=tree
