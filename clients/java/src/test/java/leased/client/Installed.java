package leased.client;

import java.util.List;

/**
 * Where test.sh put the package under test: the jar build.sh made, its dependencies, and the
 * examples compiled against them. Tests run in clients/java (test.sh's working directory).
 */
final class Installed {
  private Installed() {}

  /** build/leased-client-VERSION.jar. */
  static String jar() {
    return env("LEASED_JAVA_JAR");
  }

  /** The Debian jars the pom names (jars.sh's direct_jars), as paths. */
  static List<String> directDependencies() {
    return List.of(env("LEASED_JAVA_DIRECT_JARS").split(" "));
  }

  /** The jar and everything it needs at run time, as a class path: what a consumer has. */
  static String jarAndDependencies() {
    return jar() + ":" + env("LEASED_JAVA_DEPENDENCIES");
  }

  /** The examples (src/examples/java, compiled by test.sh against the jar) on the jar's path. */
  static String examplesClasspath() {
    return env("LEASED_JAVA_EXAMPLES") + ":" + jarAndDependencies();
  }

  /**
   * The tests and examples on the jar's path with the tests' own dependencies (the PostgreSQL
   * driver, JUnit): the class path of a test's own processes (FencingHolder).
   */
  static String testClasspath() {
    return env("LEASED_JAVA_TEST_CLASSPATH");
  }

  private static String env(String name) {
    String value = System.getenv(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalStateException(name + " is not set: run the tests with clients/java/test.sh");
    }
    return value;
  }
}
