import Foundation

/// A seeded pseudo-random source (SplitMix64): the same seed gives the same cases everywhere.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    var state: UInt64
    /// Starts the sequence of `seed`.
    public init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state = state &+ 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &self)] }
    mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &self) < percent }
}

/// The oracle's model: every primitive type the store keeps, a flags and a plain enum, a complex
/// type, a collection of strings, a derived entity type and a collection-valued navigation, so
/// that generated expressions reach each of them.
public enum OracleModel {
    public static let metadata = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.01"><edmx:DataServices>
        <Schema Namespace="O" xmlns="http://docs.oasis-open.org/odata/ns/edm">
        <EnumType Name="Status"><Member Name="New" Value="0"/><Member Name="Open" Value="1"/>
          <Member Name="Closed" Value="2"/></EnumType>
        <EnumType Name="Color" IsFlags="true"><Member Name="Red" Value="1"/><Member Name="Green" Value="2"/>
          <Member Name="Blue" Value="4"/></EnumType>
        <ComplexType Name="Address"><Property Name="City" Type="Edm.String"/>
          <Property Name="Zip" Type="Edm.String"/></ComplexType>
        <EntityType Name="Item"><Key><PropertyRef Name="ID"/></Key>
          <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
          <Property Name="B" Type="Edm.Boolean"/><Property Name="U8" Type="Edm.Byte"/>
          <Property Name="I8" Type="Edm.SByte"/><Property Name="I16" Type="Edm.Int16"/>
          <Property Name="I32" Type="Edm.Int32"/><Property Name="I64" Type="Edm.Int64"/>
          <Property Name="F" Type="Edm.Single"/><Property Name="D" Type="Edm.Double"/>
          <Property Name="M" Type="Edm.Decimal" Scale="variable"/><Property Name="S" Type="Edm.String"/>
          <Property Name="N" Type="Edm.String"/><Property Name="G" Type="Edm.Guid"/>
          <Property Name="Day" Type="Edm.Date"/><Property Name="At" Type="Edm.DateTimeOffset" Precision="3"/>
          <Property Name="T" Type="Edm.TimeOfDay" Precision="3"/><Property Name="Dur" Type="Edm.Duration"/>
          <Property Name="Bin" Type="Edm.Binary"/><Property Name="St" Type="O.Status"/>
          <Property Name="Col" Type="O.Color"/><Property Name="Addr" Type="O.Address"/>
          <Property Name="Tags" Type="Collection(Edm.String)"/>
          <NavigationProperty Name="Lines" Type="Collection(O.Line)" Partner="Item"/></EntityType>
        <EntityType Name="Special" BaseType="O.Item"><Property Name="Extra" Type="Edm.Int32"/></EntityType>
        <EntityType Name="Line"><Key><PropertyRef Name="ID"/></Key>
          <Property Name="ID" Type="Edm.Int32" Nullable="false"/><Property Name="ItemID" Type="Edm.Int32"/>
          <Property Name="Qty" Type="Edm.Int32"/><Property Name="Note" Type="Edm.String"/>
          <NavigationProperty Name="Item" Type="O.Item" Partner="Lines">
            <ReferentialConstraint Property="ItemID" ReferencedProperty="ID"/></NavigationProperty></EntityType>
        <EntityContainer Name="C">
          <EntitySet Name="Items" EntityType="O.Item">
            <NavigationPropertyBinding Path="Lines" Target="Lines"/></EntitySet>
          <EntitySet Name="Lines" EntityType="O.Line">
            <NavigationPropertyBinding Path="Item" Target="Items"/></EntitySet>
        </EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    // Pools of values, with the edges each type has.
    static let bytes = ["0", "1", "7", "200", "255"]
    static let sbytes = ["-128", "-1", "0", "5", "127"]
    static let int16s = ["-300", "0", "12", "32767"]
    static let int32s = ["-5", "0", "1", "2", "3", "10", "42", "1000"]
    static let int64s = ["-9000000000", "0", "7", "1099511627776"]
    static let singles = ["0.5", "1.25", "-2", "3.3"]
    static let doubles = ["0", "-1.5", "2.5", "3.14159", "1e10", "0.1", "-0.5"]
    static let decimals = ["0", "1.50", "-2.25", "12345678901234567890.123", "0.1", "7"]
    /// Strings: empty, case, spaces and other Unicode white space, a quote, non-ASCII letters
    /// (lower/upper by Unicode rules), numbers in text.
    public static let strings = [
        "", "a", "Alpha", "alpha beta", " padded ", "It's", "Zürich", "ÄRGER", "straße", "123", "-7", "12.5",
        "ABC", "x y z", "\u{00A0}nbsp\u{00A0}", "1e3", "Ωmega",
    ]
    static let guids = [
        "00000000-0000-0000-0000-000000000001", "6f9619ff-8b86-d011-b42d-00cf4fc964ff",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
    ]
    static let dates = ["2020-01-05", "2019-12-31", "2024-02-29", "1999-01-01", "2020-01-01"]
    static let instants = [
        "2020-01-01T10:00:00+02:00", "2020-01-01T08:00:00Z", "2019-12-31T23:30:00-01:00",
        "2024-02-29T12:34:56.789Z", "2020-01-05T00:00:00Z",
    ]
    static let times = ["00:00:00", "12:30:15", "23:59:59.5", "08:00:00"]
    static let durations = ["P1D", "PT1H", "-PT30M", "P2DT3H4M5.5S", "PT0S"]
    static let binaries = ["AQID", "", "/w=="]
    static let statuses = ["New", "Open", "Closed"]
    static let colors = ["Red", "Blue", "Red,Green", "Red,Green,Blue", "Green"]
    static let tags = ["a", "b", "steel", "x y"]

    /// The items and lines of one seed as JSON payloads (`{"value":[…]}`).
    public static func rows(seed: UInt64, items count: Int) -> (items: String, lines: String) {
        var random = SeededRandom(seed: seed)
        var items: [String] = []
        var lines: [String] = []
        var lineID = 1
        for id in 1...count {
            var fields = ["\"ID\":\(id)"]
            let special = random.chance(25)
            if special { fields.insert("\"@odata.type\":\"#O.Special\"", at: 0) }
            fields += values(
                [
                    ("B", ["true", "false"], false), ("U8", bytes, false), ("I8", sbytes, false),
                    ("I16", int16s, false), ("I32", int32s, false), ("I64", int64s, false), ("F", singles, false),
                    ("D", doubles, false), ("M", decimals, false), ("S", strings, true), ("N", strings, true),
                    ("G", guids, true), ("Day", dates, true), ("At", instants, true), ("T", times, true),
                    ("Dur", durations, true), ("Bin", binaries, true), ("St", statuses, true), ("Col", colors, true),
                ], &random)
            fields.append(address(type: nil, &random))
            let itemTags = tags.filter { _ in random.chance(40) }
            fields.append("\"Tags\":[\(itemTags.map(json).joined(separator: ","))]")
            if special { fields.append("\"Extra\":\(maybe(int32s, quoted: false, &random))") }
            items.append("{" + fields.joined(separator: ",") + "}")
            for _ in 0..<Int.random(in: 0...3, using: &random) {
                let qty = maybe(int32s, quoted: false, &random)
                let note = maybe(strings, quoted: true, &random)
                lines.append("{\"ID\":\(lineID),\"ItemID\":\(id),\"Qty\":\(qty),\"Note\":\(note)}")
                lineID += 1
            }
        }
        return ("{\"value\":[\(items.joined(separator: ",\n"))]}", "{\"value\":[\(lines.joined(separator: ",\n"))]}")
    }

    /// A value of `pool` as JSON, or null one time in five.
    static func maybe(_ pool: [String], quoted: Bool, _ random: inout SeededRandom) -> String {
        if random.chance(20) { return "null" }
        let value = random.pick(pool)
        return quoted ? json(value) : value
    }

    /// `"Name":value` for each property, from its pool (strings quoted when `quoted`).
    static func values(_ properties: [(String, [String], Bool)], _ random: inout SeededRandom) -> [String] {
        properties.map { name, pool, quoted in "\"\(name)\":\(maybe(pool, quoted: quoted, &random))" }
    }

    /// An `Addr` member: null one time in five, else a city and a zip (with V2's `__metadata`
    /// when `type` is given).
    static func address(type: String?, _ random: inout SeededRandom) -> String {
        if random.chance(20) { return "\"Addr\":null" }
        let city = maybe(strings, quoted: true, &random)
        let zip = maybe(["10115", "8001", "00000"], quoted: true, &random)
        let metadata = type.map { "\"__metadata\":{\"type\":\"\($0)\"}," } ?? ""
        return "\"Addr\":{\(metadata)\"City\":\(city),\"Zip\":\(zip)}"
    }

    static func json(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
