import Foundation
import Testing
@testable import ODataCore

@Suite struct MetadataParserTests {
    static let corpus = Conformance.files(in: "metadata/v4") + Conformance.files(in: "metadata/v2") + Conformance.files(in: "metadata/vocabularies")

    @Test func corpusIsPresent() {
        #expect(Self.corpus.count >= 49, "expected the shared conformance metadata beside the repository")
    }

    @Test(arguments: corpus.map(\.lastPathComponent))
    func everyConformanceDocumentParses(_ name: String) throws {
        let url = try #require(Self.corpus.first { $0.lastPathComponent == name })
        let model = try MetadataParser().parse(try Data(contentsOf: url))
        #expect(!model.schemas.isEmpty)
        // Every entity set's type resolves, and every navigation property has a type.
        for container in model.entityContainers {
            for set in container.entitySets where !set.entityType.isEmpty {
                #expect(model.entityType(set.entityType) != nil || model.references.contains { ref in ref.includes.contains { set.entityType.hasPrefix($0.namespace) } },
                        "\(name): \(set.name) has unresolved type \(set.entityType)")
            }
        }
        for schema in model.schemas {
            for type in schema.entityTypes {
                for nav in type.navigationProperties { #expect(!nav.type.name.isEmpty, "\(name): \(type.name)/\(nav.name) has no type") }
            }
        }
    }

    @Test(arguments: ["test1.xml", "test2.xml", "annotationtarget1.xml"])
    func invalidDocumentsAreRejectedInStrictMode(_ name: String) throws {
        let data = try Conformance.data("metadata/invalid/" + name)
        #expect(throws: MetadataError.self) { try MetadataParser(options: .init(strict: true)).parse(data) }
        do {
            _ = try MetadataParser(options: .init(strict: true)).parse(data)
        } catch {
            #expect(error.code == .schemaViolation)
            #expect(error.line > 1)
            #expect(error.elementPath.contains("Schema[org.example]"))
        }
    }

    @Test func doubleKeyNamesTheSecondKeyElement() throws {
        let data = try Conformance.data("metadata/invalid/test1.xml")
        do {
            _ = try MetadataParser(options: .init(strict: true)).parse(data)
            Issue.record("expected an error")
        } catch {
            #expect(error.line == 9)
            #expect(error.elementPath.hasSuffix("EntityType[DoubleKey]/Key"))
            #expect(error.message.contains("Key"))
        }
    }

    @Test func malformedXMLGivesLineAndColumn() {
        let text = """
        <?xml version="1.0"?>
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">
          <edmx:DataServices>
            <Schema Namespace="A" xmlns="http://docs.oasis-open.org/odata/ns/edm">
              <EntityType Name="T">
            </Schema>
          </edmx:DataServices>
        </edmx:Edmx>
        """
        do {
            _ = try MetadataParser().parse(text)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .malformedXML)
            #expect(error.line == 6)
            #expect(error.column > 0)
            #expect(error.description.contains("line 6"))
        }
    }

    /// Found by the `csdl` fuzz target: a NUL in a tag after an `encoding="utf-7"` declaration;
    /// stopping Foundation's parser from the error callback then crashed in libxml2 (SIGSEGV).
    @Test(arguments: ["utf-7", "UTF-7", "utf-16", "iso-8859-1", "utf-8", "nonsense"])
    func aNULInATagAfterAnEncodingDeclarationIsAnError(encoding: String) {
        let head = "<?xml version=\"1.0\" encoding=\"\(encoding)\" ?>"
        for body in ["<N\0M/>", "\r\n<N\0\0\0M P=\"x\"/>", "<a><b\0/></a>", "<a></b>", "<a b c/>"] {
            #expect(throws: MetadataError.self) { try MetadataParser().parse(Data((head + body).utf8)) }
        }
    }

    /// Found by the `error` fuzz target (ODataError reads XML bodies with the same parser): an
    /// element name that is not UTF-8 trapped inside Foundation's XMLParser.
    @Test func bytesThatAreNotUTF8AreAnErrorNotATrap() {
        for bytes: [UInt8] in [[0x3C, 0x43, 0xE4, 0x7A, 0xFF, 0xFF, 0x2F, 0x3E], [0x3C, 0x61, 0xFF, 0x20, 0x62, 0x2F, 0x3E],
                               Array("<a b=\"".utf8) + [0xFF] + Array("\"/>".utf8),
                               Array("<?xml version=\"1.0\"?><a>".utf8) + [0xC0, 0xAF] + Array("</a>".utf8)] {
            #expect(throws: MetadataError.self) { try MetadataParser().parse(Data(bytes)) }
            #expect(throws: (any Error).self) { try ODataError.parse(bytes, httpStatus: 500) }
        }
    }

    /// Found by the `csdl` and `error` fuzz targets: Foundation's XMLParser on Linux crashes
    /// (strlen of NULL) on a processing instruction without data, such as a broken declaration.
    /// A comment with `--` inside, then a processing instruction: libxml2 ends the comment
    /// elsewhere and reached the instruction, which crashed Foundation's parser (fuzzing).
    @Test func commentsWithDoubleHyphensAreAnError() throws {
        for text in ["<a><!-- a -- b --><?x?></a>", "<a><!------ x ---></a>", "<S!---<!----- --><!-- y -- z --><?xm--?>"] {
            #expect(XMLTreeBuilder.malformedComment(Array(text.utf8)) != nil, "\(text)")
            #expect(throws: MetadataError.self) { try MetadataParser().parse(text) }
        }
        for text in ["<a><!-- fine --><![CDATA[<!-- a -- b -->]]></a>", "<a/>", "<!---->"] {
            #expect(XMLTreeBuilder.malformedComment(Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test func processingInstructionsAreAnErrorNotACrash() throws {
        for text in [
            "<?xm?>\n<a/>", "<a><?x?></a>", "<?xml version=\"1.0\"?><a><?pi?></a>", "<?x y?><a/>",
            // A declaration broken by a `>` that hides the next instruction (the fuzzer's).
            "<?xml\t><?xl?>>~",
        ] {
            #expect(throws: MetadataError.self, "\(text)") { try MetadataParser().parse(Data(text.utf8)) }
            #expect(throws: (any Error).self) { try ODataError.parse(Array(text.utf8), httpStatus: 500) }
        }
        // The declaration itself, and `<?` in comments and CDATA, are fine.
        for text in ["<?xml version=\"1.0\"?><!-- <?not a pi?> --><a><![CDATA[<?x?>]]></a>", "<a/>", "\u{FEFF}<?xml version='1.0'?><a/>"] {
            #expect(XMLTreeBuilder.processingInstruction(Array(text.utf8)) == nil, "\(text)")
        }
        #expect(throws: Never.self) { try MetadataParser().parse(try Conformance.data("metadata/v4/northwind-v4.xml")) }
    }

    @Test func arbitraryBytesNeverCrash() {
        var generator = SystemRandomNumberGenerator()
        for length in [0, 1, 7, 64, 512] {
            for _ in 0..<20 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
                #expect(throws: MetadataError.self) { try MetadataParser().parse(Data(bytes)) }
            }
        }
        // Truncations of a real document fail cleanly.
        if let data = try? Conformance.data("metadata/v4/trippin-SampleService-Models-TripPin.xml") {
            for cut in stride(from: 1, to: data.count, by: max(1, data.count / 40)) {
                _ = try? MetadataParser().parse(data.prefix(cut))
            }
        }
    }

    static let skeleton = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="S" xmlns="http://docs.oasis-open.org/odata/ns/edm">BODY</Schema></edmx:DataServices></edmx:Edmx>
    """

    @Test func unknownTypeIsAnErrorWithItsPlace() {
        let text = Self.skeleton.replacingOccurrences(of: "BODY", with: """
        <EntityType Name="T"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Bad" Type="S.Missing"/></EntityType>
        """)
        do {
            _ = try MetadataParser().parse(text)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .unknownType)
            #expect(error.message.contains("S.Missing"))
            #expect(error.elementPath.hasSuffix("EntityType[T]/Property[Bad]"))
            #expect(error.line == 3)
        }
    }

    @Test func brokenReferencesAreErrorsInStrictModeAndWarningsOtherwise() throws {
        let text = Self.skeleton.replacingOccurrences(of: "BODY", with: """
        <EntityType Name="T"><Key><PropertyRef Name="Nope"/></Key><Property Name="ID" Type="Edm.Int32"/></EntityType>
        """)
        let lenient = try MetadataParser().parse(text)
        #expect(lenient.warnings.count == 1)
        #expect(lenient.warnings[0].contains("Nope"))
        #expect(throws: MetadataError.self) { try MetadataParser(options: .init(strict: true)).parse(text) }
    }

    @Test func v4ModelDetails() throws {
        let model = try MetadataParser().parse(try Conformance.data("metadata/v4/trippin-SampleService-Models-TripPin.xml"))
        #expect(model.version == .v4)
        let ns = "Microsoft.OData.SampleService.Models.TripPin"
        let person = try #require(model.entityType(ofEntitySet: "People"))
        #expect(person.qualifiedName == "\(ns).Person")
        #expect(model.key(of: person).map(\.name) == ["UserName"])
        let trips = try #require(model.navigationProperty("Trips", ofStructuredType: "\(ns).Person"))
        #expect(trips.containsTarget)
        #expect(trips.type.isCollection)
        #expect(model.targetEntitySet(from: "People", navigationPath: "Friends")?.name == "People")
        let flags = model.schemas.flatMap(\.enumTypes).first { $0.name == "PersonGender" }
        #expect(flags?.members.map(\.name) == ["Male", "Female", "Unknown"])
        #expect(model.functionImport("GetNearestAirport") != nil)
        #expect(model.actionImport("ResetDataSource") != nil)
        let summary = model.summary
        #expect(summary.entitySets == 4)
        #expect(summary.singletons == 1)
    }

    @Test func v2AssociationsResolveIntoNavigationProperties() throws {
        let model = try MetadataParser().parse(try Conformance.data("metadata/v2/northwind-v2-pyodata.xml"))
        #expect(model.version == .v2)
        let category = try #require(model.navigationProperty("Category", ofStructuredType: "NorthwindModel.Product"))
        #expect(category.type == TypeReference(name: "NorthwindModel.Category"))
        #expect(category.nullable)
        #expect(category.partner == "Products")
        #expect(category.referentialConstraints == [ReferentialConstraint(property: "CategoryID", referencedProperty: "CategoryID")])
        let products = try #require(model.navigationProperty("Products", ofStructuredType: "NorthwindModel.Category"))
        #expect(products.type == TypeReference(name: "NorthwindModel.Product", isCollection: true))
        #expect(products.referentialConstraints.isEmpty)
        #expect(model.targetEntitySet(from: "Products", navigationPath: "Category")?.name == "Categories")
        #expect(model.targetEntitySet(from: "Categories", navigationPath: "Products")?.name == "Products")
        #expect(model.summary.entitySets == 26)
    }

    @Test func v2OnDeleteAndSAPAnnotations() throws {
        let library = try MetadataParser().parse(try Conformance.data("metadata/v2/olingo-v2-library-odata2ts.xml"))
        let cascading = library.schemas.flatMap(\.entityTypes).flatMap(\.navigationProperties).filter { $0.onDelete == .cascade }
        #expect(!cascading.isEmpty)
        let sap = try MetadataParser().parse(try Conformance.data("metadata/v2/pyodata-EXAMPLE_SRV-sap-annotations.xml"))
        let labels = sap.schemas.flatMap(\.annotations).filter { $0.term == "sap:label" }
        #expect(!labels.isEmpty)
        #expect(labels.allSatisfy { $0.target.contains("/") || $0.target.contains(".") })
        // The unqualified type names in this document are read with a warning.
        #expect(sap.warnings.contains { $0.contains("not namespace-qualified") })
    }

    @Test func annotationsKeepTermTargetAndValue() throws {
        let model = try MetadataParser().parse(try Conformance.data("metadata/v4/oasis-ExampleService.xml"))
        let all = model.schemas.flatMap(\.annotations)
        #expect(!all.isEmpty)
        #expect(all.allSatisfy { !$0.term.isEmpty && !$0.target.isEmpty })
        // Aliases in terms are resolved to namespaces.
        #expect(all.contains { $0.term.hasPrefix("Org.OData.") })
    }

    @Test func keyAliasesAndFunctionOverloads() throws {
        let aliases = try MetadataParser().parse(try Conformance.data("metadata/v4/oasis-key-aliases.xml"))
        let keys = aliases.schemas.flatMap(\.entityTypes).flatMap(\.key)
        #expect(keys.contains { $0.alias != nil && $0.name.contains("/") })
        let trippin = try MetadataParser().parse(try Conformance.data("metadata/v4/trippin-SampleService-Models-TripPin.xml"))
        let bound = trippin.schemas.flatMap(\.functions).filter(\.isBound)
        #expect(!bound.isEmpty)
        #expect(bound.allSatisfy { $0.bindingParameterType != nil && $0.returnType != nil })
    }
}
