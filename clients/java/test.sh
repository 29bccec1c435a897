#!/usr/bin/env bash
# Tests the Java client as users get it: build.sh makes build/leased-client-0.1.0.jar, then the
# JUnit 5 tests and the examples (src/examples/java) are compiled and run against that jar and its
# dependencies (never against build/classes), and a consumer program (consumer-test/Main.java)
# runs on the jar and its dependencies alone. Every test talks to a real leased on a real
# redis-server over loopback TCP. Installs what is missing (as root, from Debian: see jars.sh).
#
# LEASED_BIN: the leased binary to test against; default <repo>/target/debug/leased (or under
# CARGO_TARGET_DIR), built with cargo if missing. Arguments select tests instead of all (JUnit's
# console launcher, e.g. --select-method
# leased.client.GiveUpRaceTest#cancellingWithoutAReleaseLeavesLeasesHeld, with
# LEASED_JAVA_GIVE_UP_CONTROL=1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/jars.sh"
# The tests' own: JUnit, the Redis leased runs on (and the fencing tests' resource), PostgreSQL
# and its JDBC driver for the fencing tests (the client itself needs no driver: java.sql is the
# JDK's). Debian packages no Java Redis client: the tests speak RESP themselves (Resp.java).
install_missing "${build_packages[@]}" junit5 redis-server postgresql libpostgresql-jdbc-java
test_jars=/usr/share/java/postgresql.jar

if [[ -z ${LEASED_BIN:-} ]]; then
  export LEASED_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/leased"
  if [[ ! -x $LEASED_BIN ]]; then
    (cd "$repo" && cargo build --bin leased)
  fi
fi

"$here/build.sh"
build="$here/build"
jar="$build/leased-client-0.1.0.jar"
junit=/usr/share/java/junit-platform-console-standalone.jar
test_classpath="$jar:$build/test-classes:$dependency_classpath:$test_jars"

# The tests and the examples in one javac run (it starts slowly); the examples use only the jar.
mkdir -p "$build/test-classes"
javac -J-XX:TieredStopAtLevel=1 --release 17 -encoding UTF-8 -Xlint:all,-try -Werror \
  -d "$build/test-classes" -cp "$jar:$dependency_classpath:$test_jars:$junit" \
  $(find "$here/src/test/java" "$here/src/examples/java" -name '*.java')

java -version 2>&1 | head -1
# What the tests find the package under test by (src/test/java/leased/client/Installed.java).
export LEASED_JAVA_JAR="$jar"
export LEASED_JAVA_DEPENDENCIES="$dependency_classpath"
export LEASED_JAVA_DIRECT_JARS=$(printf '/usr/share/java/%s.jar ' "${direct_jars[@]}")
export LEASED_JAVA_EXAMPLES="$build/test-classes"
export LEASED_JAVA_TEST_CLASSPATH="$test_classpath" # for the tests' own processes (FencingHolder)
# Every test, unless the arguments select some.
selection=("$@")
((${#selection[@]})) || selection=(--scan-class-path "$build/test-classes")
# Test classes run concurrently (each has its own redis-server and leased), the methods of one
# class in turn; the classes whose bounds are on timing are @Isolated: they run alone.
parallel=(
  --config=junit.jupiter.execution.parallel.enabled=true
  --config=junit.jupiter.execution.parallel.mode.classes.default=concurrent
  --config=junit.jupiter.execution.parallel.config.strategy=fixed
  --config=junit.jupiter.execution.parallel.config.fixed.parallelism=4
)
cd "$here" # the tests read pom.xml and consumer-test/ from here
java -XX:TieredStopAtLevel=1 -jar "$junit" "${parallel[@]}" \
  --class-path "$test_classpath" \
  "${selection[@]}" --disable-banner --disable-ansi-colors --details=tree
