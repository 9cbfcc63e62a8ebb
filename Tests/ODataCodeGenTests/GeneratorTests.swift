import Foundation
import ODataCore
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@testable import ODataCodeGen

/// The package's root folder (two levels above this file's folder).
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
let conformance = packageRoot.deletingLastPathComponent().appendingPathComponent("shared/odata-conformance/metadata")

/// Runs a program at the lowest CPU priority (the compilers these tests start must not starve
/// the servers of tests running beside them), waiting on a dispatch thread rather than on the
/// two-thread concurrency pool; returns its exit status and what it printed (stdout and stderr).
///
/// It spawns with `posix_spawnp` rather than Foundation's `Process`: the test process crashed
/// inside `Process` (a bad read in `run()`) when these long compiler runs overlapped the CLI
/// tests' processes, twice on CI.
func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
            continuation.resume(with: Result { try spawnAndWait(["nice", "-n", "19"] + arguments) })
        }
    }
}

struct SpawnError: Error, CustomStringConvertible {
    var description: String
}

private func spawnAndWait(_ arguments: [String]) throws -> (status: Int32, output: String) {
    // The child writes into a file, not a pipe: no other child can inherit a pipe's write end
    // and keep the read below waiting.
    let log = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-spawn-\(UUID().uuidString).log")
    defer { try? FileManager.default.removeItem(at: log) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 1, log.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let spawned = posix_spawnp(&pid, arguments[0], &actions, nil, argv, environ)
    guard spawned == 0 else { throw SpawnError(description: "cannot start \(arguments[0]): \(spawned)") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    // WIFEXITED: the low 7 bits are 0; the exit status is the next byte.
    let exitStatus: Int32 = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    let output = (try? Data(contentsOf: log)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    return (exitStatus, output)
}

/// Type-checks generated files in Swift 6 mode against the built ODataCore module; returns
/// the compiler's errors and warnings.
func typecheck(_ files: [URL], internalImportsByDefault: Bool = false) async throws -> String {
    let modules = packageRoot.appendingPathComponent(".build/debug/Modules").path
    var arguments = ["swiftc", "-typecheck", "-swift-version", "6", "-I", modules]
    if internalImportsByDefault { arguments += ["-enable-upcoming-feature", "InternalImportsByDefault"] }
    let result = try await run(arguments + files.map(\.path))
    return result.output.split(separator: "\n").filter { $0.contains("error:") || $0.contains("warning:") }
        .joined(separator: "\n") + (result.status == 0 ? "" : "\nexit \(result.status)")
}

@Suite struct NamingTests {
    @Test func membersAndTypesAreEscapedDeterministically() {
        #expect(SwiftNames.member("CustomerID") == "customerID")
        #expect(SwiftNames.member("ID") == "id")
        #expect(SwiftNames.member("URLPath") == "urlPath")
        #expect(SwiftNames.member("class") == "class_")
        #expect(SwiftNames.member("Self") == "self_")
        #expect(SwiftNames.member("Type") == "type")
        #expect(SwiftNames.member("Protocol") == "protocol_")
        #expect(SwiftNames.member("Description") == "description_")
        #expect(SwiftNames.member("Key") == "key_")
        #expect(SwiftNames.member("my-prop.x") == "myPropX")
        #expect(SwiftNames.member("to_Items") == "toItems")
        #expect(SwiftNames.member("get_max") == "getMax")
        #expect(SwiftNames.member("_internal") == "_internal")
        #expect(SwiftNames.member("a_1") == "a_1")
        #expect(SwiftNames.member("2ndValue") == "_2ndValue")
        #expect(SwiftNames.member("Größe") == "größe")
        #expect(SwiftNames.type("customer") == "Customer")
        #expect(SwiftNames.type("String") == "String_")
        #expect(SwiftNames.type("Key") == "Key_")
        #expect(SwiftNames.type("Fields") == "Fields_")
        #expect(SwiftNames.enumCase("default") == "default_")
        #expect(SwiftNames.unique(["a", "b", "a", "a_2"]) == ["a", "b", "a_2", "a_2_2"])
        #expect(SwiftNames.stringLiteral("a\"b\\c\n") == #""a\"b\\c\n""#)
    }
}

@Suite struct GeneratorTests {
    /// A model with what breaks naive generators: inheritance with an abstract base and an
    /// inherited key, a self-referencing to-one navigation, a recursive complex type, a type
    /// definition, a flags enum with a zero member, names that are keywords, reserved or not
    /// identifiers, one simple name in two namespaces, streams, untyped values, and
    /// operations with overloads.
    static let hardModel = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
        <Schema Namespace="Hard" xmlns="http://docs.oasis-open.org/odata/ns/edm">
          <TypeDefinition Name="Weight" UnderlyingType="Edm.Decimal"/>
          <EnumType Name="Access" IsFlags="true"><Member Name="None" Value="0"/><Member Name="Read" Value="1"/>
            <Member Name="Write" Value="2"/><Member Name="default" Value="4"/></EnumType>
          <EnumType Name="Empty"/>
          <ComplexType Name="Node"><Property Name="Label" Type="Edm.String"/><Property Name="Parent" Type="Hard.Node"/>
            <Property Name="Children" Type="Collection(Hard.Node)"/></ComplexType>
          <ComplexType Name="Fields"><Property Name="prefix" Type="Edm.String"/></ComplexType>
          <EntityType Name="Person" Abstract="true"><Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int64" Nullable="false"/><Property Name="class" Type="Edm.String"/>
            <Property Name="Self" Type="Edm.String"/><Property Name="my-name" Type="Edm.String"/>
            <Property Name="Key" Type="Edm.String"/><Property Name="key" Type="Edm.String"/>
            <Property Name="Photo" Type="Edm.Stream"/><Property Name="Extra" Type="Edm.Untyped"/>
            <Property Name="Tags" Type="Collection(Edm.String)"/><Property Name="Weight" Type="Hard.Weight"/>
            <Property Name="Rights" Type="Hard.Access" Nullable="false"/><Property Name="Tree" Type="Hard.Node"/>
            <Property Name="Settings" Type="Hard.Fields"/>
            <NavigationProperty Name="Manager" Type="Hard.Person"/>
            <NavigationProperty Name="Reports" Type="Collection(Hard.Person)"/>
          </EntityType>
          <EntityType Name="Employee" BaseType="Hard.Person"><Property Name="Salary" Type="Edm.Decimal"/>
            <Property Name="Born" Type="Edm.Date"/><Property Name="Starts" Type="Edm.TimeOfDay"/>
            <Property Name="Span" Type="Edm.Duration"/><Property Name="Id" Type="Edm.Guid"/>
            <Property Name="Where" Type="Edm.GeographyPoint"/><Property Name="Blob" Type="Edm.Binary"/>
          </EntityType>
          <EntityType Name="String"><Key><PropertyRef Name="Value"/></Key><Property Name="Value" Type="Edm.String" Nullable="false"/></EntityType>
          <Function Name="Find"><Parameter Name="Name" Type="Edm.String"/><ReturnType Type="Collection(Hard.Person)"/></Function>
          <Function Name="Find"><Parameter Name="ID" Type="Edm.Int64" Nullable="false"/><ReturnType Type="Hard.Person"/></Function>
          <Function Name="Count"><ReturnType Type="Edm.Int32" Nullable="false"/></Function>
          <Action Name="Reset"><Parameter Name="Rights" Type="Collection(Hard.Access)"/></Action>
          <Function Name="Colleagues" IsBound="true"><Parameter Name="person" Type="Hard.Person"/>
            <Parameter Name="Max" Type="Edm.Int32" Nullable="false"/><ReturnType Type="Collection(Hard.Person)"/></Function>
          <Action Name="Promote" IsBound="true"><Parameter Name="people" Type="Collection(Hard.Employee)"/>
            <Parameter Name="target" Type="Edm.String"/></Action>
          <Action Name="Rename" IsBound="true"><Parameter Name="node" Type="Hard.Node"/></Action>
          <EntityContainer Name="Container">
            <EntitySet Name="People" EntityType="Hard.Person"/><EntitySet Name="Strings" EntityType="Hard.String"/>
            <EntitySet Name="Employees" EntityType="Hard.Employee"/><Singleton Name="Me" Type="Hard.Employee"/>
            <FunctionImport Name="Find" Function="Hard.Find"/><FunctionImport Name="Count" Function="Hard.Count"/>
            <ActionImport Name="Reset" Action="Hard.Reset"/>
          </EntityContainer>
        </Schema>
        <Schema Namespace="Other" xmlns="http://docs.oasis-open.org/odata/ns/edm">
          <ComplexType Name="Node"><Property Name="Label" Type="Edm.String"/></ComplexType>
        </Schema>
        </edmx:DataServices></edmx:Edmx>
        """

    func generate(
        _ xml: String, access: SwiftGenerator.Access = .public, namespace: String? = nil
    ) throws -> (String, [String]) {
        var generator = SwiftGenerator(model: try MetadataParser().parse(xml), access: access, namespace: namespace)
        let source = generator.generate()
        return (source, generator.notes)
    }

    @Test func hardModelGeneratesCompilableDeterministicCode() async throws {
        let (source, notes) = try generate(Self.hardModel)
        #expect(try generate(Self.hardModel).0 == source, "deterministic")
        // Inheritance: the derived type has the base's properties and key.
        #expect(source.contains("public struct Employee: ODataCore.ODataEntity"))
        #expect(source.contains("derived from `Hard.Person`"))
        #expect(source.contains("(abstract: read entities of its derived types through it)"))
        // Escaped names.
        #expect(source.contains("public var class_: Swift.String?"))
        #expect(source.contains("public var self_: Swift.String?"))
        #expect(source.contains("public var myName: Swift.String?"))
        #expect(
            source.contains("public var key_: Swift.String?") && source.contains("public var key__2: Swift.String?"))
        #expect(source.contains("public struct String_: ODataCore.ODataEntity"))
        #expect(source.contains("public struct Fields_: ODataCore.ODataStructure"))
        #expect(source.contains("public var prefix_: ODataCore.Field<Swift.String>"))
        // One simple name in two namespaces: both qualified.
        #expect(source.contains("public struct Hard_Node:") && source.contains("public struct Other_Node:"))
        // Recursion through a single value is boxed; through a collection it is not.
        #expect(source.contains("public var tree: Hard_Node?"))
        #expect(source.contains("private var _parent: ODataCore.Indirect<Hard_Node>?"))
        #expect(source.contains("private var _manager: ODataCore.Indirect<Person>?"))
        #expect(source.contains("public var reports: [Person]?"))
        // Flags with a zero member, a type definition, a stream left out with a note.
        #expect(source.contains("public static let none: Access = []"))
        #expect(source.contains("public typealias Weight = ODataCore.DecimalValue"))
        #expect(!source.contains("photo"))
        #expect(notes.contains { $0.contains("Photo") && $0.contains("stream") })
        // Operations: overloads by signature, a value result, an action with a collection parameter.
        #expect(
            source.contains("public static func find(name: Swift.String? = nil) -> ODataCore.OperationCall<[Person]>"))
        #expect(source.contains("public static func find(id: Swift.Int64) -> ODataCore.OperationCall<Person?>"))
        #expect(source.contains("public static func count() -> ODataCore.OperationCall<Swift.Int32>"))
        #expect(source.contains("public static func reset(rights: [Access]) -> ODataCore.OperationCall<Swift.Void>"))
        #expect(source.contains("public static let me: ODataCore.TypedSingleton<Employee>"))
        // Bound operations: in the bound type's Operations enum; one bound to a complex type is noted.
        #expect(
            source.contains(
                "public static func colleagues(on target: ODataCore.TypedPath, max: Swift.Int32) -> ODataCore.OperationCall<[Person]>"
            ))
        #expect(
            source.contains(
                "public static func promote(onCollection target: ODataCore.TypedPath, target_2: Swift.String? = nil)"))
        #expect(notes.contains { $0.contains("Hard.Rename") })

        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-gen-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let publicFile = folder.appendingPathComponent("Hard.swift")
        try source.write(to: publicFile, atomically: true, encoding: .utf8)
        // Code that uses the types: it must compile too.
        let use = folder.appendingPathComponent("Use.swift")
        try """
        import ODataCore
        func use() throws -> String {
            var boss = Employee(id: 1, rights: [.read, .write])
            boss.tree = Hard_Node(label: "root", children: [Hard_Node(label: "leaf")])
            // A navigation typed with the base type holds the base type's struct.
            let bossAsPerson = try Person(entity: boss.entity())
            var worker = Employee(id: 2, rights: .none, manager: bossAsPerson)
            worker.manager?.manager = bossAsPerson
            let entity = worker.entity()
            let back = try Employee(entity: entity)
            precondition(back.manager == nil)  // navigation is written only for deep inserts
            let query = Container.employees.query.filter { $0.salary > 100 && $0.tree.label == "root" }
                .expand(\\.manager) { $0.select(\\.class_) }.filter { $0.manager == nil && $0.tree.children.any { $0.label == "x" } }
            let call = Person.Operations.colleagues(on: Container.people.path(Person.Key(id: 1)), max: 3)
            _ = call.request(for: .v4)
            return try query.url(for: .v4)
        }
        """.write(to: use, atomically: true, encoding: .utf8)
        #expect(try await typecheck([publicFile, use]) == "")
        #expect(try await typecheck([publicFile, use], internalImportsByDefault: true) == "")
        // Internal access inside a namespace compiles too.
        let (internalSource, _) = try generate(Self.hardModel, access: .internal, namespace: "Hard")
        #expect(internalSource.contains("enum Hard {") && !internalSource.contains("public "))
        let internalFile = folder.appendingPathComponent("HardInternal.swift")
        try internalSource.write(to: internalFile, atomically: true, encoding: .utf8)
        #expect(try await typecheck([internalFile]) == "")
    }

    /// Every conformance `$metadata` that parses generates code that compiles in Swift 6 mode
    /// without a warning.
    @Test func everyConformanceModelCompiles() async throws {
        var files: [URL] = []
        for version in ["v4", "v2"] {
            let folder = conformance.appendingPathComponent(version)
            let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".xml") }
                .sorted()
            files += names.map { folder.appendingPathComponent($0) }
        }
        #expect(files.count >= 42)
        let output = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-conformance-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: output) }
        var generated: [(String, URL)] = []
        for file in files {
            guard let model = try? MetadataParser().parse(Data(contentsOf: file)) else { continue }
            var generator = SwiftGenerator(model: model, sourceName: file.lastPathComponent)
            let target = output.appendingPathComponent(file.deletingPathExtension().lastPathComponent + ".swift")
            try generator.generate().write(to: target, atomically: true, encoding: .utf8)
            generated.append((file.lastPathComponent, target))
        }
        #expect(generated.count >= 40, "models that parse")
        // Each model is its own module (their type names clash); one compiler at a time, at the
        // lowest priority, beside the other tests.
        var results: [(String, String)] = []
        for (name, file) in generated {
            results.append((name, try await typecheck([file], internalImportsByDefault: true)))
        }
        #expect(results.count == generated.count)
        for (name, diagnostics) in results {
            #expect(diagnostics == "", "\(name)")
        }
    }

    /// The build-tool plugin in a package of its own: `swift build` generates the types from a
    /// `*.metadata.xml` in the target, and the program that uses them runs.
    @Test func buildToolPluginGeneratesTypesAtBuildTime() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-plugin-\(UUID().uuidString)")
        let sources = folder.appendingPathComponent("Sources/TypedApp")
        try FileManager.default.createDirectory(at: sources, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let identity = packageRoot.lastPathComponent.lowercased()
        try """
        // swift-tools-version: 6.1
        import PackageDescription

        let package = Package(
            name: "TypedApp",
            platforms: [.macOS(.v14)],
            dependencies: [.package(path: "\(packageRoot.path)")],
            targets: [
                .executableTarget(
                    name: "TypedApp",
                    dependencies: [.product(name: "ODataCore", package: "\(identity)")],
                    plugins: [.plugin(name: "ODataGenerator", package: "\(identity)")]
                )
            ],
            swiftLanguageModes: [.v6]
        )
        """.write(to: folder.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(
            at: conformance.appendingPathComponent("v4/trippin-SampleService-Models-TripPin.xml"),
            to: sources.appendingPathComponent("TripPin.metadata.xml"))
        try """
        import ODataCore

        let query = DefaultContainer.people.query.filter { $0.firstName.starts(with: "R") }.top(2)
        print(try query.url(for: .v4))
        var person = Person(userName: "russell", firstName: "Russell", lastName: "Whyte", concurrency: 1)
        person.emails = ["r@example.com"]
        print(try Person(entity: person.entity()).emails)
        """.write(to: sources.appendingPathComponent("main.swift"), atomically: true, encoding: .utf8)
        let build = try await run([
            "swift", "build", "--package-path", folder.path, "--scratch-path", folder.appendingPathComponent(".build").path,
        ])
        #expect(build.status == 0, "\(build.output.suffix(3000))")
        #expect(
            !build.output.contains("warning: ")
                || build.output.split(separator: "\n").filter {
                    $0.contains("warning: ") && !$0.contains("unhandled") && !$0.contains("distributed-tracing")
                }.isEmpty, "\(build.output.suffix(2000))")
        let program = try await run([folder.appendingPathComponent(".build/debug/TypedApp").path])
        #expect(program.output == "People?$filter=startswith(FirstName,'R')&$top=2\n[\"r@example.com\"]\n")
    }
}
