# The Java client's dependencies as Debian's jars in /usr/share/java, sourced by build.sh and
# test.sh. Debian's libgrpc-java does not declare most of what grpc-java needs, so the lists are
# spelled out here rather than resolved.

# The pom's dependencies, one Debian jar each (PomTest checks that the pom names exactly these, at
# the versions Debian's maven-repo gives them). grpc-netty is the transport (run time only) and
# geronimo-annotation javax.annotation.Generated, which the stubs carry (compile time only).
direct_jars=(grpc-api grpc-stub grpc-protobuf protobuf grpc-netty geronimo-annotation-1.3-spec)

# What Maven brings in through those (their own dependencies), which Debian's packages leave out.
transitive_jars=(grpc-core grpc-context grpc-protobuf-lite guava perfmark-api
  error_prone_annotations jsr305 netty-buffer netty-codec netty-codec-http netty-codec-http2
  netty-common netty-handler netty-resolver netty-transport netty-transport-native-unix-common)

# Everything the client needs at compile and run time, as a class path.
dependency_classpath=$(printf '/usr/share/java/%s.jar:' "${direct_jars[@]}" "${transitive_jars[@]}")
dependency_classpath=${dependency_classpath%:}

# The Debian packages that hold them, and the tools build.sh runs.
build_packages=(
  protobuf-compiler                    # protoc
  libprotobuf-dev                      # google/protobuf/timestamp.proto, which lease.proto imports
  protobuf-compiler-grpc-java-plugin   # grpc_java_plugin
  libgrpc-java                         # grpc-api, -core, -netty, -stub, -protobuf 1.41
  libprotobuf-java                     # protobuf.jar
  libnetty-java                        # grpc-netty's transport (not a dependency of libgrpc-java)
  libperfmark-java                     # grpc-core's tracing API (idem)
  libgeronimo-annotation-1.3-spec-java # javax.annotation.Generated, which the stubs carry
  libguava-java liberror-prone-java libjsr305-java # grpc's own dependencies, not declared either
)

# Installs (as root, with apt-get) the packages given that are missing, and a JDK if javac is.
install_missing() {
  local missing=() package
  command -v javac >/dev/null || missing+=(default-jdk-headless) # Java 17 on Debian 12
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$package")
    fi
  done
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
