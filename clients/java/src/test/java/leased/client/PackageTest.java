package leased.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.jar.JarFile;
import java.util.jar.Manifest;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.xml.parsers.DocumentBuilderFactory;
import lease.v1.Lease;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/** The package as shipped: what the jar holds, where the tests load it from, and the pom. */
class PackageTest {
  /** Every test runs against the jar, never against compiled classes of the source tree. */
  @Test
  void theClientAndItsStubsAreLoadedFromTheJar() throws Exception {
    Path jar = Path.of(Installed.jar()).toRealPath();
    for (Class<?> shipped : new Class<?>[] {LeaseClient.class, Lease.class}) {
      Path from = Path.of(shipped.getProtectionDomain().getCodeSource().getLocation().toURI());
      assertEquals(jar, from.toRealPath(), shipped.getName());
    }
    assertFalse(System.getProperty("java.class.path").contains("build/classes"));
  }

  @Test
  void theJarCarriesTheContractAndItsModuleName() throws Exception {
    try (JarFile jar = new JarFile(Installed.jar())) {
      var proto = jar.getEntry("lease/v1/lease.proto");
      assertNotNull(proto, "lease/v1/lease.proto is not in the jar");
      assertArrayEquals(
          Files.readAllBytes(Path.of("../../proto/lease/v1/lease.proto")),
          jar.getInputStream(proto).readAllBytes());
      Manifest manifest = jar.getManifest();
      assertEquals("leased.client", manifest.getMainAttributes().getValue("Automatic-Module-Name"));
      assertEquals(
          pom().getElementsByTagName("version").item(0).getTextContent(),
          manifest.getMainAttributes().getValue("Implementation-Version"));
    }
  }

  /**
   * pom.xml is well-formed, and its dependencies are exactly the jars build.sh compiles against
   * (jars.sh's direct_jars): each groupId:artifactId:version names, in Debian's Maven repository
   * (/usr/share/maven-repo, which Debian's packages fill), the very jar file the build uses.
   */
  @Test
  void thePomNamesTheJarsTheClientIsBuiltAgainst() throws Exception {
    Document pom = pom();
    Map<String, String> properties = new HashMap<>();
    NodeList declared = ((Element) pom.getElementsByTagName("properties").item(0)).getChildNodes();
    for (int i = 0; i < declared.getLength(); i++) {
      if (declared.item(i) instanceof Element property) {
        properties.put(property.getTagName(), property.getTextContent().trim());
      }
    }
    TreeSet<Path> named = new TreeSet<>();
    NodeList dependencies = pom.getElementsByTagName("dependency");
    for (int i = 0; i < dependencies.getLength(); i++) {
      Element dependency = (Element) dependencies.item(i);
      String group = child(dependency, "groupId");
      String artifact = child(dependency, "artifactId");
      String version = substitute(child(dependency, "version"), properties);
      Path jar =
          Path.of("/usr/share/maven-repo", group.replace('.', '/'), artifact, version)
              .resolve(artifact + "-" + version + ".jar");
      assertTrue(
          Files.exists(jar),
          group + ":" + artifact + ":" + version + " is not what Debian installed: no " + jar);
      named.add(jar.toRealPath());
    }
    TreeSet<Path> builtAgainst = new TreeSet<>();
    for (String jar : Installed.directDependencies()) {
      builtAgainst.add(Path.of(jar).toRealPath());
    }
    assertEquals(builtAgainst, named);
  }

  /**
   * Every java code block of README.md is code the examples or the consumer run: the README's
   * code compiles and runs, and cannot drift from it (lines compared without their indentation).
   */
  @Test
  void theReadmeShowsCodeThatRuns() throws Exception {
    StringBuilder sources = new StringBuilder();
    try (var files = Files.walk(Path.of("src/examples/java"))) {
      for (Path file : (Iterable<Path>) files.filter(Files::isRegularFile)::iterator) {
        sources.append(unindented(Files.readString(file)));
      }
    }
    sources.append(unindented(Files.readString(Path.of("consumer-test/Main.java"))));
    Matcher block = Pattern.compile("(?s)```java\n(.*?)```").matcher(Files.readString(Path.of("README.md")));
    int blocks = 0;
    while (block.find()) {
      blocks++;
      assertTrue(
          sources.toString().contains(unindented(block.group(1))),
          "README.md shows code that no example has:\n" + block.group(1));
    }
    assertEquals(10, blocks, "java blocks in README.md");
  }

  /** Each line stripped of its leading and trailing blanks, blank lines dropped. */
  private static String unindented(String code) {
    StringBuilder lines = new StringBuilder();
    code.lines().map(String::strip).filter(line -> !line.isEmpty()).forEach(line -> lines.append(line).append('\n'));
    return lines.toString();
  }

  private static Document pom() throws Exception {
    return DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(Path.of("pom.xml").toFile());
  }

  private static String child(Element parent, String tag) {
    return parent.getElementsByTagName(tag).item(0).getTextContent().trim();
  }

  /** ${name} replaced by the pom's property of that name. */
  private static String substitute(String text, Map<String, String> properties) {
    Matcher reference = Pattern.compile("\\$\\{([^}]+)}").matcher(text);
    return reference.replaceAll(found -> Matcher.quoteReplacement(properties.get(found.group(1))));
  }
}
