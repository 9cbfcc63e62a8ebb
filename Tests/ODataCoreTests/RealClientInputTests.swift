import Foundation
import Testing
@testable import ODataCore

/// What real clients and backends send that our own never did: percent-encoded delimiters
/// (Python's requests encodes `,`), V2 nested expand paths, V2 dates with offsets, batch
/// bodies that start with a byte-order mark.
@Suite struct RealClientInputTests {
    @Test func percentEncodedCommaSeparatesExpandItems() throws {
        for version in [ODataVersion.v401, .v2] {
            let url = try URLParser(version: version).parse("SalesOrders?$expand=Items%2CPartner&$select=OrderID%2CGrossAmount")
            #expect(url.query.expand?.map(\.path) == [["Items"], ["Partner"]], "\(version)")
            #expect(url.query.select?.count == 2, "\(version)")
        }
        // Nested options too, and an encoded semicolon still stays inside a $search term.
        let nested = try URLParser(version: .v401).parse("Customers?$expand=Orders%28%24select%3DID%2CDate%3B%24top%3D2%29%2CManager($search=a%3Bb)")
        let items = try #require(nested.query.expand)
        #expect(items.map(\.path) == [["Orders"], ["Manager"]])
        #expect(items[0].options?.select?.count == 2)
        #expect(items[0].options?.top == 2)
        #expect(items[1].options?.search == .term("a;b"))
    }

    @Test func percentEncodedParenthesesAndQuotesInThePath() throws {
        let parser = URLParser(version: .v401)
        let plain = try parser.parse("Products(5)/Name").path.segments.map(\.kind)
        for encoded in ["Products(5%29/Name", "Products%285%29/Name", "Products%285)/Name"] {
            #expect(try parser.parse(encoded).path.segments.map(\.kind) == plain, "\(encoded)")
        }
        let quoted = try parser.parse("Customers(%27O%27%27Neil%27%29/Orders").path.segments.map(\.kind)
        #expect(quoted == (try parser.parse("Customers('O''Neil')/Orders").path.segments.map(\.kind)))
        // An encoded quote inside a quoted key is data; a raw '/' there is still an error.
        #expect(throws: SyntaxError.self) { try parser.parse("Customers('a/b')") }
        #expect(try parser.parse("Customers('a%2Fb')").path.segments.count == 2)
        // Spaces written as %20 or '+' in the query.
        let spaced = try parser.parse("Products?$filter=Price%20gt%2010&$orderby=Name+desc")
        #expect(spaced.query.filter != nil)
        #expect(spaced.query.orderBy?.first?.descending == true)
    }

    @Test func v2NestedExpandPathsBecomeNestedItems() throws {
        let url = try URLParser(version: .v2).parse("Customers?$expand=Orders/Items/Product,Orders,Orders/Customer,Contacts")
        let items = try #require(url.query.expand)
        #expect(items.map(\.path) == [["Orders"], ["Contacts"]])
        let orders = try #require(items[0].options?.expand)
        #expect(orders.map(\.path) == [["Items"], ["Customer"]])
        #expect(orders[0].options?.expand?.map(\.path) == [["Product"]])
        // V4 keeps a path as a path (complex members and casts before the navigation).
        let v4 = try URLParser(version: .v401).parse("Customers?$expand=Address/Country")
        #expect(v4.query.expand?.map(\.path) == [["Address", "Country"]])
        // Many items stay linear: one pass per level.
        let many = (0..<5_000).map { "Orders/N\($0)" }.joined(separator: ",")
        let wide = try URLParser(version: .v2).parse("Customers?$expand=" + many)
        #expect(wide.query.expand?.first?.options?.expand?.count == 5_000)
        // A deep path is refused, not recursed into.
        let deep = Array(repeating: "A", count: 50_000).joined(separator: "/")
        #expect(throws: SyntaxError.self) { try URLParser(version: .v2).parse("Customers?$expand=" + deep) }
        let hundred = try URLParser(version: .v2).parse("Customers?$expand=" + Array(repeating: "A", count: 100).joined(separator: "/"))
        var depth = 0
        var level = hundred.query.expand
        while let items = level, let first = items.first {
            depth += 1
            level = first.options?.expand
        }
        #expect(depth == 100)
    }

    @Test func v2LiteralsParseWithTheV2Grammar() throws {
        let url = "SalesOrders?$filter=GrossAmount gt 100M and Quantity eq 12L and OrderDate ge datetime'2020-01-01T00:00:00'"
            + " and Token eq guid'12345678-aaaa-bbbb-cccc-1234567890ab' and substringof('SO',OrderID) and day(OrderDate) eq 5"
        #expect(throws: SyntaxError.self) { try URLParser(version: ODataVersion.v4.grammar).parse(url) }
        let parsed = try URLParser(version: ODataVersion.v2.grammar).parse(url)
        #expect(parsed.query.filter != nil)
        #expect(ODataVersion.v4.grammar == .v401 && ODataVersion.v2.grammar == .v2 && ODataVersion.v3.grammar == .v3)
    }

    @Test func v2DateTimeLiteralFitsAV4Date() {
        let midnight = Literal.convert(.primitive(.dateTime(DateTimeOffsetValue(date: DateValue(year: 2020, month: 1, day: 2),
                                                                                time: TimeOfDayValue(hour: 0, minute: 0, second: 0),
                                                                                offsetMinutes: nil))), to: .date)
        #expect(midnight == .primitive(.date(DateValue(year: 2020, month: 1, day: 2))))
        // A time of day would be lost: not converted.
        let noon = Literal.convert(.primitive(.dateTime(DateTimeOffsetValue(date: DateValue(year: 2020, month: 1, day: 2),
                                                                            time: TimeOfDayValue(hour: 12, minute: 0, second: 0),
                                                                            offsetMinutes: nil))), to: .date)
        #expect(noon == nil)
    }

    @Test func batchBodyStartingWithAByteOrderMark() throws {
        let body = """
        --batch_1
        Content-Type: application/http
        Content-Transfer-Encoding: binary

        GET Customers HTTP/1.1


        --batch_1
        Content-Type: multipart/mixed; boundary=changeset_1

        --changeset_1
        Content-Type: application/http
        Content-Transfer-Encoding: binary
        Content-ID: 1

        POST Customers HTTP/1.1
        Content-Type: application/json

        {"ID":1}
        --changeset_1--
        --batch_1--

        """.replacingOccurrences(of: "\n", with: "\r\n")
        let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
        let plain = try MultipartBatch.read(Array(body.utf8))
        for given in [nil, "batch_1"] {
            let read = try MultipartBatch.read(bom + Array(body.utf8), boundary: given)
            #expect(read.boundary == "batch_1")
            #expect(read.parts == plain.parts)
            #expect(read.parts.count == 2)
            guard case .changeSet(let set) = read.parts[1] else {
                Issue.record("the second part must be a change set")
                continue
            }
            #expect(set.operations.first?.message.url == "Customers")
        }
        // A first delimiter that cannot be read is an error, never a batch missing its first part.
        let damaged = "\u{00A0}" + body
        #expect(throws: PayloadError.self) { try MultipartBatch.read(Array(damaged.utf8), boundary: "batch_1") }
        #expect(throws: PayloadError.self) { try MultipartBatch.read(Array(damaged.utf8)) }
    }

    @Test func v2DateOffsetsAreWrittenAsUTC() throws {
        var entity = Entity(typeName: "NS.T")
        let local = DateTimeOffsetValue(date: DateValue(year: 2024, month: 3, day: 1), time: TimeOfDayValue(hour: 10, minute: 0, second: 0),
                                        offsetMinutes: 60)
        entity["At"] = .primitive(.dateTimeOffset(local))
        entity["On"] = .primitive(.dateTime(DateTimeOffsetValue(date: DateValue(year: 2024, month: 3, day: 1),
                                                                 time: TimeOfDayValue(hour: 9, minute: 0, second: 0), offsetMinutes: nil)))
        let text = String(decoding: V2JSONWriter().write(entity), as: UTF8.self)
        // 10:00+01:00 is 09:00Z = 1709283600000 ms.
        #expect(text.contains(#""At":"/Date(1709283600000+0000)/""#), "\(text)")
        #expect(text.contains(#""On":"/Date(1709283600000)/""#), "\(text)")
        guard case .dateTimeOffset(let read)? = V2JSONReader.parseDate("/Date(1709283600000+0000)/", as: .dateTimeOffset) else {
            Issue.record("not read back")
            return
        }
        #expect(read.instant == local.instant)
    }
}
