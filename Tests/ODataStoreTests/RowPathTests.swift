import Foundation
import Testing
import ODataCore
@testable import ODataStore

/// `Store.queryRows` writes flat collections straight from rows: the bytes must be the ones
/// `query` plus `V4JSONWriter` give, for every kind of value and every metadata level.
@Suite struct RowPathTests {
    static let metadata = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="F" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EnumType Name="Color" IsFlags="true"><Member Name="Red" Value="1"/><Member Name="Green" Value="2"/><Member Name="Blue" Value="4"/></EnumType>
      <EntityType Name="Group"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Title" Type="Edm.String"/>
        <NavigationProperty Name="Items" Type="Collection(F.Item)" Partner="Group"/></EntityType>
      <EntityType Name="Item"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Name" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal" Scale="variable"/>
        <Property Name="Rating" Type="Edm.Double"/>
        <Property Name="Weight" Type="Edm.Single"/>
        <Property Name="Stock" Type="Edm.Int64"/>
        <Property Name="Small" Type="Edm.Byte"/>
        <Property Name="Active" Type="Edm.Boolean"/>
        <Property Name="Released" Type="Edm.DateTimeOffset" Precision="7"/>
        <Property Name="Available" Type="Edm.Date"/>
        <Property Name="Opens" Type="Edm.TimeOfDay" Precision="3"/>
        <Property Name="Warranty" Type="Edm.Duration"/>
        <Property Name="Code" Type="Edm.Guid"/>
        <Property Name="Photo" Type="Edm.Binary"/>
        <Property Name="Color" Type="F.Color"/>
        <Property Name="GroupID" Type="Edm.Int32"/>
        <NavigationProperty Name="Group" Type="F.Group" Partner="Items"><ReferentialConstraint Property="GroupID" ReferencedProperty="ID"/></NavigationProperty>
      </EntityType>
      <EntityType Name="SpecialItem" BaseType="F.Item"><Property Name="Note" Type="Edm.String"/></EntityType>
      <EntityContainer Name="Service">
        <EntitySet Name="Groups" EntityType="F.Group"><NavigationPropertyBinding Path="Items" Target="Items"/></EntitySet>
        <EntitySet Name="Items" EntityType="F.Item"><NavigationPropertyBinding Path="Group" Target="Groups"/></EntitySet>
      </EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    static let items = #"""
    {"value":[
     {"@odata.etag":"W/\"1\"","ID":1,"Name":"Hammer \"XL\"\n\\ ü 😀","Price":12.50,"Rating":4.5,"Weight":1.25,"Stock":9007199254740993,"Small":7,"Active":true,"Released":"2020-01-01T10:00:00.1234567+02:00","Available":"2020-01-05","Opens":"08:30:00.125","Warranty":"P1DT2H","Code":"0a000000-0000-4000-8000-00000000000f","Photo":"AQID","Color":"Red,Blue","GroupID":1},
     {"ID":2,"Name":"","Price":-0.001,"Rating":-1e-7,"Weight":0,"Stock":-5,"Small":0,"Active":false,"Released":"1999-12-31T23:59:59Z","Available":"0001-01-01","Opens":"00:00:00","Warranty":"-PT0.5S","Code":"00000000-0000-0000-0000-000000000000","Photo":"","Color":"Green","GroupID":2},
     {"ID":3,"Name":null,"Price":null,"Rating":null,"Weight":null,"Stock":null,"Small":null,"Active":null,"Released":null,"Available":null,"Opens":null,"Warranty":null,"Code":null,"Photo":null,"Color":null,"GroupID":null},
     {"ID":4,"Name":"Big","Price":123456789012345678901234567890,"Rating":1e300,"Weight":3.4e38,"Stock":9223372036854775807,"Small":255,"Active":true,"Released":"9999-12-31T23:59:59.9999999Z","Available":"9999-12-31","Opens":"23:59:59.999","Warranty":"P9999D","Code":"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF","Photo":"/w==","Color":"Red,Green,Blue","GroupID":1},
     {"@odata.type":"#F.SpecialItem","ID":5,"Name":"Special","Note":"only here","Price":-1234.5,"Rating":"NaN","Weight":"-INF","Released":"2024-02-29T12:00:00-00:00","GroupID":2},
     {"ID":6,"Name":"Six \"quoted\"\t\\ \u0001","Price":0,"Rating":"INF","Released":"0001-01-01T00:00:00.5000000+00:00","Color":"0","GroupID":2}
    ]}
    """#

    static func store(_ dir: TemporaryDirectory) async throws -> Store {
        let model = try MetadataParser().parse(metadata)
        let store = try await Store.create(path: dir.path("flat.sqlite"), model: model, key: "row-key")
        let reader = V4JSONReader(model: model)
        let groups = try reader.readCollection(Array(#"{"value":[{"ID":1,"Title":"Tools"},{"ID":2,"Title":null}]}"#.utf8), entityType: "F.Group").entities
        let items = try reader.readCollection(Array(items.utf8), entityType: "F.Item").entities
        try await store.write { writer in
            try writer.bulkInsert(groups, into: "Groups")
            try writer.bulkInsert(items, into: "Items")
        }
        return store
    }

    static let urls = [
        "Items", "Groups", "Items?$filter=Price gt 1", "Items?$orderby=Rating desc", "Items?$top=2&$skip=1", "Items?$count=true",
        "Items?$count=true&$filter=GroupID eq 2&$orderby=Name", "Items?$search=hammer", "Groups(1)/Items", "Groups(2)/Items?$orderby=ID desc",
        "Items/F.SpecialItem", "Items?$filter=Color has F.Color'Blue'", "Items?$filter=ID eq 99", "Items?$skiptoken=r2o2",
    ]

    @Test func rowsGiveTheBytesOfTheEntityPath() async throws {
        let dir = TemporaryDirectory()
        let store = try await Self.store(dir)
        let formats = [JSONFormat(), JSONFormat(metadata: .full), JSONFormat(metadata: .none), JSONFormat(ieee754Compatible: true)]
        var compared = 0
        for url in Self.urls {
            for pageSize in [nil, 2] as [Int?] {
                for format in formats {
                    let set = url.hasPrefix("Groups") && !url.contains("/Items") ? "Groups" : "Items"
                    guard case .collection(var collection) = try await store.query(url, pageSize: pageSize) else {
                        Issue.record("\(url): not a collection")
                        continue
                    }
                    collection.context = "$metadata#" + set
                    let expected = V4JSONWriter(format: format).write(collection)
                    guard var page = try await store.rowPage(url, pageSize: pageSize, format: format, context: "$metadata#" + set) else {
                        Issue.record("\(url): a flat collection did not take the row path")
                        continue
                    }
                    #expect(page.nextLink == collection.nextLink, "\(url) page \(pageSize ?? 0)")
                    #expect(page.entityCount == collection.entities.count, "\(url)")
                    let written = page.writer.finish(nextLink: page.nextLink, deltaLink: nil)
                    #expect(String(decoding: written, as: UTF8.self) == String(decoding: expected, as: UTF8.self), "\(url) page \(pageSize ?? 0) \(format)")
                    compared += 1
                }
            }
        }
        #expect(compared == Self.urls.count * 8)
        // The payload reads back as the stored entities, special values included.
        let page = try #require(try await store.rowPage("Items", context: nil))
        var writer = page.writer
        let read = try V4JSONReader(model: store.model).readCollection(writer.finish(nextLink: nil, deltaLink: nil), entityType: "F.Item")
        #expect(read.entities.count == 6)
        #expect(read.entities[0]["Name"] == .primitive(.string("Hammer \"XL\"\n\\ ü 😀")))
        #expect(read.entities[0]["Stock"] == .primitive(.int64(9_007_199_254_740_993)))
        #expect(read.entities[4].typeName == "F.SpecialItem")
        #expect(read.entities[4]["Note"] == .primitive(.string("only here")))
        store.close()
    }

    @Test func flatRowsAreStoredAsTheirEntitiesAre() async throws {
        let dir = TemporaryDirectory()
        let model = try MetadataParser().parse(Self.metadata)
        // The derived-type entity needs the general reader; the rest is flat.
        let payload = Array(Self.items.replacingOccurrences(of: ##""@odata.type":"#F.SpecialItem","##, with: "").replacingOccurrences(of: #","Note":"only here""#, with: "").utf8)
        let reader = V4JSONReader(model: model)
        let rows = try #require(try reader.readFlatCollection(payload, entityType: "F.Item"))
        let entities = try reader.readCollection(payload, entityType: "F.Item").entities
        #expect(rows.entityCount == 6)
        let byRows = try await Store.create(path: dir.path("rows.sqlite"), model: model)
        let byEntities = try await Store.create(path: dir.path("entities.sqlite"), model: model)
        try await byRows.write { writer in try writer.bulkInsert(rows, into: "Items") }
        try await byEntities.write { writer in try writer.bulkInsert(entities, into: "Items") }
        let sql = "SELECT * FROM \(StoreSchema.quote(byRows.schema.table(forEntitySet: "Items")?.name ?? "")) ORDER BY ID"
        let stored = try await byRows.read { reader in try reader.connection.query(sql) }
        let expected = try await byEntities.read { reader in try reader.connection.query(sql) }
        #expect(stored.count == 6)
        #expect(stored == expected)
        // A duplicate key is a conflict, as for entities.
        await #expect(throws: StoreError.self) { try await byRows.write { writer in try writer.bulkInsert(rows, into: "Items") } }
        byRows.close()
        byEntities.close()
    }

    /// Rows whose stored forms are written per row into fixed slots (DateTimeOffsets, decimals),
    /// with every offset and decimals too long for a slot: inserted and merged as rows, they are
    /// stored as the same entities are.
    @Test func rowsWrittenIntoSlotsAreStoredAsTheirEntitiesAre() async throws {
        var g = SystemRandomNumberGenerator()
        var lines: [String] = []
        for id in 1...400 {
            // JSON numbers have no leading zeros.
            let digits = String(Int.random(in: 1...9, using: &g))
                + (0..<Int.random(in: 0...89, using: &g)).map { _ in String(Int.random(in: 0...9, using: &g)) }.joined()
            let scale = Int.random(in: 0...min(20, digits.count - 1), using: &g)
            var price = digits
            if scale > 0 { price.insert(".", at: price.index(price.endIndex, offsetBy: -scale)) }
            if Bool.random(using: &g) { price = "-" + price }
            let offset = [
                "Z", "+00:00", "-00:00", "+14:00", "-12:45", "+05:30",
                String(format: "%@%02d:%02d", Bool.random(using: &g) ? "+" : "-", Int.random(in: 0...14, using: &g),
                       Int.random(in: 0...59, using: &g)),
            ].randomElement(using: &g) ?? "Z"
            let fraction = Bool.random(using: &g) ? "" : "." + String(Int.random(in: 0...9_999_999, using: &g))
            let released = String(format: "%04d-%02d-%02dT%02d:%02d:%02d", Int.random(in: 1...9999, using: &g),
                                  Int.random(in: 1...12, using: &g), Int.random(in: 1...28, using: &g),
                                  Int.random(in: 0...23, using: &g), Int.random(in: 0...59, using: &g),
                                  Int.random(in: 0...59, using: &g)) + fraction + offset
            // ETags and edit links on some rows only: the others must not keep a previous row's.
            // ETags short enough to be held inline by a Swift string, and longer ones (bound
            // in place from the string's own storage), one with an escape and a non-ASCII letter.
            let longTag = id % 6 == 0 ? "-a-longer-entity-tag-\\u00fc-\u{00e9}" : ""
            let etag = id % 3 == 0 ? #""@odata.etag":"W/\"\#(id)\#(longTag)\"","# : ""
            let editLink = id % 5 == 0 ? #""@odata.editLink":"Items(\#(id))","# : ""
            lines.append(#"{\#(etag)\#(editLink)"ID":\#(id),"Price":\#(price),"Released":"\#(released)","Name":"n\#(id)"}"#)
        }
        // The last days of months and years, a leap day and the ends of the range.
        for (offset, released) in ["2024-02-29T23:59:59.9999999-01:00", "2023-12-31T23:30:00+00:00", "0001-01-01T00:00:00+01:00",
                                   "9999-12-31T23:59:59.9999999-14:00", "2000-03-01T00:00:00Z", "1900-02-28T23:59:59+00:01"].enumerated() {
            lines.append(#"{"ID":\#(1_000 + offset),"Price":0,"Released":"\#(released)"}"#)
        }
        let payload = Array(#"{"value":["#.utf8) + Array(lines.joined(separator: ",").utf8) + Array("]}".utf8)
        let model = try MetadataParser().parse(Self.metadata)
        let reader = V4JSONReader(model: model)
        let rows = try #require(try reader.readFlatCollection(payload, entityType: "F.Item"))
        let entities = try reader.readCollection(payload, entityType: "F.Item").entities
        #expect(rows.entityCount == 406)
        let dir = TemporaryDirectory()
        let byRows = try await Store.create(path: dir.path("rows.sqlite"), model: model, key: "k")
        let merged = try await Store.create(path: dir.path("merged.sqlite"), model: model, key: "k")
        let byEntities = try await Store.create(path: dir.path("entities.sqlite"), model: model, key: "k")
        try await byRows.write { writer in try writer.bulkInsert(rows, into: "Items") }
        let result = try await merged.write { writer in try writer.mergeRows(rows, into: "Items", recordSeen: false) { _ in false } }
        #expect(result.written == 406)
        try await byEntities.write { writer in try writer.bulkInsert(entities, into: "Items") }
        let table = StoreSchema.quote(byRows.schema.table(forEntitySet: "Items")?.name ?? "")
        let sql = "SELECT ID, Name, Price, Released, Rating, Color, _type, _etag, _editLink, _localID, _isLocal, _pending FROM \(table) ORDER BY ID"
        let expected = try await byEntities.read { reader in try reader.connection.query(sql) }
        #expect(expected.count == 406)
        let tags = try await byRows.read { reader in
            try reader.connection.query("SELECT _etag FROM \(table) WHERE ID IN (3, 6, 7) ORDER BY ID")
        }
        #expect(tags == [[.text("W/\"3\"")], [.text("W/\"6-a-longer-entity-tag-\u{00fc}-\u{00e9}\"")], [.null]])
        #expect(try await byRows.read { reader in try reader.connection.query(sql) } == expected)
        #expect(try await merged.read { reader in try reader.connection.query(sql) } == expected)
        // Merging the same rows again finds every one unchanged.
        let again = try await merged.write { writer in try writer.mergeRows(rows, into: "Items", recordSeen: false) { _ in false } }
        #expect(again.unchanged == 406 && again.written == 0)
        for store in [byRows, merged, byEntities] { store.close() }
    }

    /// A page built or changed by hand whose cells point outside its arrays is refused with
    /// an error that names the row and property, by the insert and by the merge, and nothing
    /// is written; a page from the reader has no such problem.
    @Test func aPageWhoseCellsPointOutsideItsArraysIsRefused() async throws {
        let (model, rows) = try RowMergeTests.flatItems()
        #expect(rows.layoutProblem == nil)
        let width = rows.propertyNames.count
        let name = try #require(rows.propertyNames.firstIndex(of: "Name"))
        let price = try #require(rows.propertyNames.firstIndex(of: "Price"))
        let released = try #require(rows.propertyNames.firstIndex(of: "Released"))
        let warranty = try #require(rows.propertyNames.firstIndex(of: "Warranty"))
        var broken: [(String, FlatCollection)] = []
        func changed(_ label: String, _ edit: (inout FlatCollection) -> Void) {
            var page = rows
            edit(&page)
            broken.append((label, page))
        }
        changed("Row 1, property Released") { $0.cells[width + released] = .instant($0.instants.count) }
        changed("Row 0, property Price") { $0.cells[price] = .decimal(-1) }
        changed("Row 1, property Warranty") { $0.cells[width + warranty] = .other($0.others.count + 5) }
        changed("Row 3, property Name") { $0.cells[3 * width + name] = .text(start: $0.text.count - 1, count: 2) }
        changed("Row 0, property Name") { $0.cells[name] = .text(start: -1, count: 1) }
        changed("cells and") { $0.cells.removeLast() }
        changed("property types for") { $0.propertyTypes.removeLast() }
        let dir = TemporaryDirectory()
        let store = try await Store.create(path: dir.path("hand.sqlite"), model: model, key: "k")
        for (label, page) in broken {
            #expect(page.layoutProblem?.contains(label) == true, "\(label): \(page.layoutProblem ?? "none")")
            do {
                try await store.write { writer in try writer.bulkInsert(page, into: "Items") }
                Issue.record("\(label): the insert took the page")
            } catch let error as StoreError {
                #expect(error.message.contains(label), "\(error.message)")
            }
            do {
                _ = try await store.write { writer in
                    try writer.mergeRows(page, into: "Items", recordSeen: false) { _ in false }
                }
                Issue.record("\(label): the merge took the page")
            } catch let error as StoreError {
                #expect(error.message.contains(label), "\(error.message)")
            }
        }
        let count = try await store.read { reader in
            try reader.connection.query(
                "SELECT count(*) FROM \(StoreSchema.quote(store.schema.table(forEntitySet: "Items")?.name ?? ""))")
        }
        #expect(count == [[.integer(0)]])
        store.close()
    }

    @Test func otherRequestsTakeTheEntityPath() async throws {
        let dir = TemporaryDirectory()
        let store = try await Self.store(dir)
        for url in ["Items?$select=Name", "Items?$expand=Group", "Groups?$expand=Items", "Items(1)", "Items/$count", "Items(1)/Name", "Items?$expand=Group/$ref"] {
            #expect(try await store.rowPage(url, context: nil) == nil, "\(url)")
            // They get what `query` answers, from the same call.
            guard case .result(let answer) = try await store.queryRows(url, context: nil) else {
                Issue.record("\(url): rows")
                continue
            }
            #expect(answer == (try await store.query(url)), "\(url)")
        }
        store.close()
        // Complex and collection properties are not flat.
        let catalogueDirectory = TemporaryDirectory()
        let catalogue = try await Catalogue.store(catalogueDirectory)
        #expect(try await catalogue.rowPage("Products", context: nil) == nil)
        #expect(try await catalogue.rowPage("Categories", context: nil) != nil)
        catalogue.close()
        // A bad request is the same error on both paths.
        let againDirectory = TemporaryDirectory()
        let again = try await Self.store(againDirectory)
        await #expect(throws: (any Error).self) { try await again.queryRows("Items?$filter=Nope eq 1", context: nil) }
        await #expect(throws: (any Error).self) { try await again.queryRows("Nothing", context: nil) }
        again.close()
    }
}

/// Merging rows of a later download (issue 22): one lookup per row compares the stored values
/// in SQL; only what changed is written and marked with the download's generation.
@Suite struct RowMergeTests {
    static func flatItems(_ edit: (String) -> String = { $0 }) throws -> (Model, FlatCollection) {
        let model = try MetadataParser().parse(RowPathTests.metadata)
        let payload = edit(
            RowPathTests.items.replacingOccurrences(of: ##""@odata.type":"#F.SpecialItem","##, with: "")
                .replacingOccurrences(of: #","Note":"only here""#, with: ""))
        return (model, try #require(try V4JSONReader(model: model).readFlatCollection(Array(payload.utf8), entityType: "F.Item")))
    }

    static func ids(_ store: Store, _ url: String) async throws -> [Int32] {
        guard case .collection(let page) = try await store.query(url) else { return [] }
        return page.entities.compactMap { entity in
            if case .primitive(.int32(let id))? = entity["ID"] { return id }
            return nil
        }
    }

    @Test func onlyChangedRowsAreWrittenAndMarked() async throws {
        let dir = TemporaryDirectory()
        let (model, rows) = try Self.flatItems()
        let store = try await Store.create(path: dir.path("merge.sqlite"), model: model, key: "merge-key")
        defer { store.close() }
        // Stored by the general path (entities), merged by rows: the stored forms must agree
        // for every kind of value, or nothing would compare equal.
        let entities = try V4JSONReader(model: model).readCollection(
            Array(RowPathTests.items.replacingOccurrences(of: ##""@odata.type":"#F.SpecialItem","##, with: "")
                .replacingOccurrences(of: #","Note":"only here""#, with: "").utf8), entityType: "F.Item").entities
        try await store.write { writer in try writer.bulkInsert(entities, into: "Items") }
        let table = StoreSchema.quote(store.schema.table(forEntitySet: "Items")?.name ?? "")
        let before = try await store.read { reader in try reader.connection.query("SELECT * FROM \(table) ORDER BY ID") }
        let same = try await store.write { writer in
            try writer.beginDownloadGeneration()
            return try writer.mergeRows(rows, into: "Items", recordSeen: false) { _ in false }
        }
        #expect(same == StoreWriter.MergeResult(written: 0, unchanged: 6, deferred: []))
        #expect(try await store.read { reader in try reader.connection.query("SELECT * FROM \(table) ORDER BY ID") } == before)
        #expect(try await Self.ids(store, "Items?$filter=sap.upsertedLastDownload()").isEmpty)

        // Item 2 changes, 7 is new, 4 has pending local changes (deferred, not written), 8 was
        // deleted locally (deferred, not inserted); 3 is not in the page.
        let (_, changed) = try Self.flatItems { payload in
            payload.replacingOccurrences(of: #""Price":-0.001"#, with: #""Price":-0.002"#)
                .replacingOccurrences(of: #""Name":"Big""#, with: #""Name":"Bigger""#)
                .replacingOccurrences(
                    of: #"{"ID":3,"Name":null,"Price":null,"Rating":null,"Weight":null,"Stock":null,"Small":null,"Active":null,"Released":null,"Available":null,"Opens":null,"Warranty":null,"Code":null,"Photo":null,"Color":null,"GroupID":null},"#,
                    with: #"{"ID":7,"Name":"Seven"},{"ID":8,"Name":"Eight"},"#)
        }
        let merged = try await store.write { writer in
            try writer.setState(in: "Items", key: ["ID": .int32(4)], pending: true)
            try writer.beginDownloadGeneration()
            let result = try writer.mergeRows(changed, into: "Items", recordSeen: true) { row in
                changed[row, 0] == .primitive(.int32(8))
            }
            let unseen = try writer.unseenRows(in: "Items").map(\.key)
            try writer.forgetSeen()
            return (result, unseen)
        }
        #expect(merged.0.written == 2)
        #expect(merged.0.unchanged == 3)
        #expect(merged.0.deferred.map { changed[$0, 0] } == [.primitive(.int32(8)), .primitive(.int32(4))])
        #expect(merged.1 == [["ID": .int32(3)]])
        #expect(try await Self.ids(store, "Items?$filter=sap.upsertedLastDownload()&$orderby=ID") == [2, 7])
        #expect(try await Self.ids(store, "Items?$filter=Name eq 'Big'") == [4])
        #expect(try await Self.ids(store, "Items?$filter=ID eq 8").isEmpty)
        // A new download generation: the marks of the last one stop counting, unwritten.
        _ = try await store.write { writer in try writer.beginDownloadGeneration() }
        #expect(try await Self.ids(store, "Items?$filter=sap.upsertedLastDownload()").isEmpty)
    }

    /// A download compares each page as it arrives and stages only the rows a merge would
    /// touch, cut from the page as they came.
    @Test func changedRowsAreFoundWithoutWritingAndCutIntoAPage() async throws {
        let dir = TemporaryDirectory()
        let (model, rows) = try Self.flatItems()
        let store = try await Store.create(path: dir.path("compare.sqlite"), model: model, key: "compare-key")
        defer { store.close() }
        try await store.write { writer in try writer.bulkInsert(rows, into: "Items") }
        let payload = RowPathTests.items.replacingOccurrences(of: ##""@odata.type":"#F.SpecialItem","##, with: "")
            .replacingOccurrences(of: #","Note":"only here""#, with: "")
            .replacingOccurrences(of: #""Name":"Big""#, with: #""Name":"Bigger""#)
            .replacingOccurrences(of: #"{"ID":2,"#, with: #"{"ID":12,"#)
            .replacingOccurrences(of: "]}", with: #"],"@odata.deltaLink":"Items?$deltatoken=\"7\""}"#)
        let bytes = Array(payload.utf8)
        let changed = try #require(try V4JSONReader(model: model).readFlatCollection(bytes, entityType: "F.Item"))
        let table = StoreSchema.quote(store.schema.table(forEntitySet: "Items")?.name ?? "")
        let before = try await store.read { reader in try reader.connection.query("SELECT * FROM \(table) ORDER BY ID") }
        let (found, unseen) = try await store.write { writer in
            try writer.setState(in: "Items", key: ["ID": .int32(6)], pending: true)
            let found = try writer.changedRows(changed, in: "Items", recordSeen: true)
            let unseen = try writer.unseenRows(in: "Items").map(\.key)
            try writer.forgetSeen()
            return (found, unseen)
        }
        // 12 is new, 4 changed, 6 has pending changes; 2 was not returned.
        #expect(found.map { changed[$0, 0] } == [.primitive(.int32(12)), .primitive(.int32(4)), .primitive(.int32(6))])
        #expect(unseen == [["ID": .int32(2)]])
        var after = try await store.read { reader in try reader.connection.query("SELECT * FROM \(table) ORDER BY ID") }
        let pendingColumn = try await store.read { reader in
            try reader.connection.query("PRAGMA table_info(\(table))").firstIndex { $0[1] == .text("_pending") } ?? 0
        }
        after[5][pendingColumn] = .integer(0)
        #expect(after == before, "nothing but the flag set here was written")
        // The cut page reads back as those entities, with the delta link.
        let cut = try #require(try V4JSONReader(model: model).readFlatCollection(changed.page(ofRows: found, from: bytes), entityType: "F.Item"))
        #expect(cut.entityCount == 3)
        #expect((0..<3).map { cut.entity(at: $0) } == found.map { changed.entity(at: $0) })
        #expect(cut.deltaLink == #"Items?$deltatoken="7""#)
        let none = try #require(try V4JSONReader(model: model).readFlatCollection(changed.page(ofRows: [], from: bytes), entityType: "F.Item"))
        #expect(none.entityCount == 0 && none.deltaLink == cut.deltaLink)
    }

    /// The rows a full read has seen are kept with the writer's connection across the read's
    /// transactions (each page is compared in its own) until `forgetSeen`.
    @Test func seenRowsLastAcrossTransactionsUntilForgotten() async throws {
        let dir = TemporaryDirectory()
        let (model, rows) = try Self.flatItems()
        let store = try await Store.create(path: dir.path("seen.sqlite"), model: model, key: "seen-key")
        defer { store.close() }
        try await store.write { writer in try writer.bulkInsert(rows, into: "Items") }
        let table = StoreSchema.quote(store.schema.table(forEntitySet: "Items")?.name ?? "")
        let stored = try await store.read { reader in
            try reader.connection.query("SELECT _rowid, ID FROM \(table) ORDER BY ID").compactMap { row -> (Int64, Int64)? in
                guard case .integer(let rowid) = row[0], case .integer(let id) = row[1] else { return nil }
                return (rowid, id)
            }
        }
        try #require(stored.count >= 3)
        func unseen() async throws -> [Int64] {
            try await store.write { writer in
                try writer.unseenRows(in: "Items").compactMap { row -> Int64? in
                    if case .int32(let id)? = row.key["ID"] { return Int64(id) }
                    return nil
                }.sorted()
            }
        }
        let all = stored.map(\.1)
        #expect(try await unseen() == all)
        try await store.write { writer in try writer.markSeen(in: "Items", rowid: stored[0].0) }
        try await store.write { writer in try writer.markSeen(in: "Items", rowid: stored[2].0) }
        #expect(try await unseen() == all.filter { $0 != stored[0].1 && $0 != stored[2].1 })
        try await store.write { writer in try writer.forgetSeen() }
        #expect(try await unseen() == all)
    }

    /// The seen rows' bitmap, across its chunks of 65,536 rowids, with negative rowids too.
    @Test func aRowidSetHoldsWhatWasInsertedAndNothingElse() {
        var set = RowidSet()
        let inserted: [Int64] = [0, 1, 63, 64, 65_535, 65_536, 3_000_000, 1 << 40, -1, -65_537]
        for rowid in inserted + [1, 64, 65_536] { set.insert(rowid) }
        #expect(set.count == inserted.count)
        for rowid in inserted { #expect(set.contains(rowid), "\(rowid)") }
        for rowid: Int64 in [2, 62, 65, 65_534, 65_537, 2_999_999, (1 << 40) + 1, -2, -65_536] {
            #expect(!set.contains(rowid), "\(rowid)")
        }
    }

    @Test func storesFromBeforeGenerationsKeepTheirMarks() async throws {
        let dir = TemporaryDirectory()
        let (model, rows) = try Self.flatItems()
        let store = try await Store.create(path: dir.path("old.sqlite"), model: model)
        defer { store.close() }
        try await store.write { writer in
            try writer.bulkInsert(rows, into: "Items")
            // What a download before generations left: a 1 on the rows it wrote.
            try writer.setState(in: "Items", key: ["ID": .int32(2)], upserted: true)
        }
        #expect(try await Self.ids(store, "Items?$filter=sap.upsertedLastDownload()") == [2])
        let generation = try await store.write { writer in try writer.beginDownloadGeneration() }
        #expect(generation == 2)
        #expect(try await Self.ids(store, "Items?$filter=sap.upsertedLastDownload()").isEmpty)
    }
}

extension Store {
    /// The page `queryRows` wrote from rows, or nil when it answered the way `query` does.
    func rowPage(_ url: String, pageSize: Int? = nil, format: JSONFormat = JSONFormat(), context: String?) async throws -> RowPage? {
        if case .rows(let page) = try await queryRows(url, pageSize: pageSize, format: format, context: context) { return page }
        return nil
    }
}
