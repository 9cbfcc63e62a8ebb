import Foundation
import Testing
@testable import ODataCore

@Suite struct URLParserTests {
    let parser = URLParser(version: .v401)

    func filter(_ text: String) throws -> CommonExpression {
        var p = ExpressionParser(text, version: .v401)
        return try p.parseComplete()
    }

    @Test func pathSegmentsAndKeys() throws {
        let url = try parser.parse("Customers('ALFKI')/Orders(OrderID=1,Line=2)/Items/$count")
        let kinds = url.path.segments.map(\.kind)
        #expect(kinds.count == 6)
        #expect(kinds[0] == .unresolved("Customers"))
        guard case .key(let single) = kinds[1], case .key(let compound) = kinds[3] else {
            Issue.record("keys missing")
            return
        }
        #expect(single.count == 1 && single[0].name == nil)
        #expect(single[0].value.node == .literal(.primitive(.string("ALFKI"))))
        #expect(compound.map(\.name) == ["OrderID", "Line"])
        #expect(kinds[5] == .count)
    }

    @Test func specialSegments() throws {
        #expect(try parser.parse("$metadata").path.segments.map(\.kind) == [.metadata])
        #expect(try parser.parse("$batch").path.segments.map(\.kind) == [.batch])
        #expect(try parser.parse("Products(1)/Name/$value").path.segments.last?.kind == .value)
        #expect(try parser.parse("Products(1)/Category/$ref").path.segments.last?.kind == .ref)
        #expect(try parser.parse("$crossjoin(Products,Categories)").path.segments.map(\.kind) == [.crossjoin(["Products", "Categories"])])
        let function = try parser.parse("Products/Ns.MostExpensive(Top=@t)?@t=5")
        #expect(function.path.segments.last?.kind == .function("Ns.MostExpensive", [NamedArgument(name: "Top", value: CommonExpression(.alias("t"), at: 21))]))
        #expect(function.query.aliases["t"]?.node == .literal(.primitive(.int32(5))))
    }

    @Test func queryOptionsAreAllParsed() throws {
        let url = try parser.parse("Orders?$filter=Amount gt 5&$orderby=Date desc,ID&$top=10&$skip=20&$count=true&$select=ID,Address/City&$expand=Items($filter=Qty gt 1;$top=2;$expand=Product($select=Name)),Customer/$ref&$search=red OR \"big box\"&$skiptoken=abc&$format=json&custom=1&!deltatoken=xyz")
        let q = url.query
        #expect(q.top == 10)
        #expect(q.skip == 20)
        #expect(q.count == true)
        #expect(q.orderBy?.count == 2)
        #expect(q.orderBy?.first?.descending == true)
        #expect(q.orderBy?.last?.descending == false)
        #expect(q.select?.map(\.kind) == [.path(["ID"]), .path(["Address", "City"])])
        #expect(q.expand?.count == 2)
        #expect(q.expand?[0].options?.top == 2)
        #expect(q.expand?[0].options?.expand?.first?.options?.select?.first?.kind == .path(["Name"]))
        #expect(q.expand?[1].isRef == true)
        #expect(q.search == .or(.term("red"), .phrase("big box")))
        #expect(q.skipToken == "abc")
        #expect(q.format == "json")
        #expect(q.deltaToken == "xyz")
        #expect(q.custom.contains(CustomOption(name: "custom", value: "1")))
    }

    @Test func v2QueryOptions() throws {
        let url = try URLParser(version: .v2).parse("Products?$filter=substringof('a',Name) and Price le 200M&$inlinecount=allpages")
        #expect(url.query.inlineCount == .allPages)
        guard case .binary(.and, let left, let right) = url.query.filter?.node else {
            Issue.record("not an and")
            return
        }
        #expect(left.node == .call("substringof", [CommonExpression(.literal(.primitive(.string("a"))), at: 12), CommonExpression(.path(PathExpression(root: .implicit, steps: [.member("Name")])), at: 16)]))
        guard case .binary(.le, _, let price) = right.node else {
            Issue.record("not le")
            return
        }
        #expect(price.node == .literal(.primitive(.decimal(DecimalValue("200")!))))
    }

    @Test func percentEncodedNamesAndPlusAsSpace() throws {
        let url = try parser.parse("Products?%24filter=Name+eq+%27a%26b%27&%24top=1")
        #expect(url.query.top == 1)
        guard case .binary(.eq, _, let right) = url.query.filter?.node else {
            Issue.record("not eq")
            return
        }
        #expect(right.node == .literal(.primitive(.string("a&b"))))
    }

    @Test func operatorPrecedence() throws {
        // a or b and c  →  a or (b and c)
        guard case .binary(.or, _, let rhs) = try filter("A or B and C").node, case .binary(.and, _, _) = rhs.node else {
            Issue.record("and must bind tighter than or")
            return
        }
        // 1 add 2 mul 3 eq 7  →  (1 add (2 mul 3)) eq 7
        guard case .binary(.eq, let sum, _) = try filter("1 add 2 mul 3 eq 7").node,
              case .binary(.add, _, let product) = sum.node, case .binary(.mul, _, _) = product.node else {
            Issue.record("mul must bind tighter than add, add tighter than eq")
            return
        }
        // not A eq B  →  (not A) eq B? No: not binds tighter than eq, so (not A) eq B.
        guard case .binary(.eq, let negated, _) = try filter("not A eq B").node, case .unary(.not, _) = negated.node else {
            Issue.record("not is unary and binds tighter than eq")
            return
        }
        // -Price gt 5 → (-Price) gt 5
        guard case .binary(.gt, let minus, _) = try filter("-Price gt 5").node, case .unary(.negate, _) = minus.node else {
            Issue.record("negation binds tighter than gt")
            return
        }
        // Color has Ns.Color'Red' and X in (1,2)
        guard case .binary(.and, let has, let inList) = try filter("Color has Ns.Color'Red' and X in (1,2)").node,
              case .binary(.has, _, _) = has.node, case .binary(.in, _, let list) = inList.node, case .list(let items) = list.node else {
            Issue.record("has/in")
            return
        }
        #expect(items.count == 2)
        #expect(try filter("(A or B) and C").node != filter("A or B and C").node)
    }

    @Test func longChainsAreBalancedOrRefusedNeverTooHigh() throws {
        // A run of `or` (a key list) becomes a balanced tree a few levels high.
        let keys = try filter((0..<5_000).map { "ID eq \($0)" }.joined(separator: " or "))
        #expect(CommonExpression.height(of: keys) <= 16)
        guard case .binary(.or, let left, let right) = keys.node else {
            Issue.record("an or expected")
            return
        }
        #expect(left.offset == 0 && right.offset > 0)
        // Three terms keep the left-to-right shape; `and` binds tighter than `or` as before.
        guard case .binary(.and, let ab, _) = try filter("A and B and C").node, case .binary(.and, _, _) = ab.node else {
            Issue.record("(A and B) and C expected")
            return
        }
        guard case .binary(.or, let a, let bc) = try filter("A or B and C").node, case .path = a.node,
              case .binary(.and, _, _) = bc.node else {
            Issue.record("A or (B and C) expected")
            return
        }
        // Chains that are not associative, and prefix operators, are refused past their limits
        // with an error that says so, not a crash.
        for deep in [(0..<5_000).map { _ in "1" }.joined(separator: " add ") + " eq 1", String(repeating: "-", count: 5_000) + "Price gt 1",
                     String(repeating: "not ", count: 5_000) + "true", String(repeating: "(", count: 500) + "1" + String(repeating: ")", count: 500)] {
            do {
                _ = try filter(deep)
                Issue.record("must be refused: \(deep.prefix(20))…")
            } catch let error as SyntaxError {
                #expect(error.code == .tooDeep, "\(error)")
            }
        }
        #expect(CommonExpression.height(of: try filter((0..<150).map { _ in "1" }.joined(separator: " add ") + " eq 1")) == 151)
        // Within the limits: 90 levels of parentheses, 90 prefix operators.
        #expect(try filter(String(repeating: "(", count: 90) + "1 eq 1" + String(repeating: ")", count: 90)).node != .literal(.null))
        #expect(try filter(String(repeating: "not ", count: 90) + "true").node != .literal(.null))
        let nested = "Customers?$expand=" + String(repeating: "A($expand=", count: 900) + "B" + String(repeating: ")", count: 900)
        #expect(throws: SyntaxError.self) { try parser.parse(nested) }
    }

    @Test func lambdasAndFunctions() throws {
        let expression = try filter("Orders/any(o:o/Items/all(i:i/Qty gt 1 and o/Total gt 5)) and contains(tolower(Name),'x') and isof(Ns.Vip) and cast(Price,Edm.Int32) gt 1")
        // Four `and` terms make a balanced tree: ((lambda and contains) and (isof and cast)).
        guard case .binary(.and, let first, _) = expression.node,
              case .binary(.and, let lambda, _) = first.node, case .path(let path) = lambda.node,
              case .lambda(.any, let variable, let predicate)? = path.steps.last else {
            Issue.record("lambda expected: \(expression)")
            return
        }
        #expect(variable == "o")
        guard case .path(let inner)? = predicate?.node, case .lambda(.all, "i", let innerPredicate)? = inner.steps.last else {
            Issue.record("nested lambda expected")
            return
        }
        #expect(inner.root == .variable("o"))
        guard case .binary(.and, let l, let r)? = innerPredicate?.node, case .binary(_, let iPath, _) = l.node, case .binary(_, let oPath, _) = r.node,
              case .path(let ip) = iPath.node, case .path(let op) = oPath.node else {
            Issue.record("paths expected")
            return
        }
        #expect(ip.root == .variable("i"))
        #expect(op.root == .variable("o"))
        for text in ["year(Date) eq 2020", "round(Price) eq 3", "geo.distance(Loc,geography'SRID=0;Point(1 2)') lt 5",
                     "matchesPattern(Name,'^A')", "Name eq $root/Customers('A')/Name", "$it/Price gt 1", "case(Price gt 5:'big',true:'small') eq 'big'",
                     "Items/$count gt 2", "@p eq 1", "Address/Ns.Home/Street eq 'x'", "[1,2] eq [1,2]", "{\"a\":1} eq {\"a\":1}"] {
            #expect(throws: Never.self, "\(text)") { _ = try filter(text) }
        }
    }

    @Test func syntaxErrorsPointAtTheProblem() {
        let cases: [(String, Int)] = [
            ("Products?$filter=Price gt", 23 + 2),
            ("Products?$filter=(Price gt 5", 28),
            ("Products?$top=ten", 14),
            ("Products?$filter=contains(Name)", 17),
            ("Products('a'", 12),
            ("Products?$orderby=", 18),
            ("Products?$foo=1", 9),
            ("Products?$top=1&$top=2", 16),
            ("Products?$filter=Name eq 'x%ZZ'", 27),
        ]
        for (url, offset) in cases {
            do {
                _ = try parser.parse(url)
                Issue.record("\(url) should fail")
            } catch {
                #expect(error.offset == offset, "\(url): \(error)")
                #expect(error.description.contains("^"))
            }
        }
    }

    @Test func caretExcerptShowsTheInput() {
        do {
            _ = try parser.parse("People?$filter=FirstName eq")
            Issue.record("expected an error")
        } catch {
            let lines = error.caretExcerpt.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.count == 2)
            #expect(lines[0].contains("FirstName eq"))
            let caret = lines[1].firstIndex(of: "^").map { lines[1].distance(from: lines[1].startIndex, to: $0) }
            #expect(caret == 2 + error.offset)
        }
    }

    @Test func randomInputNeverCrashes() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("abcXYZ019'\"()[]{}/$@%?&=,;:.-+ *#\t\u{00e9}".utf8)
        for _ in 0..<3000 {
            let length = Int.random(in: 0...40, using: &generator)
            let bytes = (0..<length).map { _ in alphabet.randomElement(using: &generator) ?? 0 }
            let text = String(decoding: bytes, as: UTF8.self)
            _ = try? parser.parse(text)
            _ = try? parser.parse("Products?$filter=" + text)
            _ = try? parser.parse("Products?$expand=" + text)
            _ = try? Literal.parse(text)
        }
        // Deep nesting is refused, not a stack overflow.
        let deep = String(repeating: "(", count: 5000) + "1" + String(repeating: ")", count: 5000)
        #expect(throws: SyntaxError.self) { try parser.parse("P?$filter=" + deep) }
        let deepSearch = String(repeating: "(", count: 5000) + "a" + String(repeating: ")", count: 5000)
        #expect(throws: SyntaxError.self) { try parser.parse("P?$search=" + deepSearch) }
    }
}
