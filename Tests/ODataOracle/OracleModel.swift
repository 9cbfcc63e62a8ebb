public import ODataCore

/// The model and the rows the oracle tests run on: one entity set, `Things`, whose type has a
/// nullable property of every primitive type the store holds, two enums and two collections.
///
/// Left out on purpose (the store holds them, but they do not suit a comparison of `$filter`
/// results): `Edm.Binary` and `Edm.Stream` (no ordering, no functions), the spatial types (the
/// store refuses their functions and casts, 501) and the V2 types `Edm.DateTime` and
/// `Edm.Time` (not in a V4 model). Complex properties and navigation are not here either:
/// the oracle checks the expression compiler on the values of one row.
///
/// The rows are written in the forms the store reads back unchanged, so that a value cast to
/// `Edm.String` is the same text from the payload and from the store: decimals without
/// trailing zeros, times with seconds and without trailing zeros in their fractions, durations
/// in their normalized form (`P1DT2H`, not `PT26H`).
public enum OracleModel {
    /// The schema namespace.
    public static let namespace = "O"
    /// The entity set every case reads.
    public static let entitySet = "Things"
    /// The qualified entity type of `Things`.
    public static let entityType = "O.Thing"
    /// The key property (Edm.Int32, 1…count).
    public static let key = "ID"

    /// The CSDL 4.0 document.
    public static let metadata = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="O" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EnumType Name="Status">
        <Member Name="New" Value="0"/><Member Name="Open" Value="1"/><Member Name="Closed" Value="2"/>
      </EnumType>
      <EnumType Name="Color" IsFlags="true">
        <Member Name="Red" Value="1"/><Member Name="Green" Value="2"/><Member Name="Blue" Value="4"/>
      </EnumType>
      <EntityType Name="Thing">
        <Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Str" Type="Edm.String"/>
        <Property Name="Flag" Type="Edm.Boolean"/>
        <Property Name="U8" Type="Edm.Byte"/>
        <Property Name="I8" Type="Edm.SByte"/>
        <Property Name="I16" Type="Edm.Int16"/>
        <Property Name="I32" Type="Edm.Int32"/>
        <Property Name="I64" Type="Edm.Int64"/>
        <Property Name="Sgl" Type="Edm.Single"/>
        <Property Name="Dbl" Type="Edm.Double"/>
        <Property Name="Dec" Type="Edm.Decimal" Precision="18" Scale="4"/>
        <Property Name="Dt" Type="Edm.Date"/>
        <Property Name="Tod" Type="Edm.TimeOfDay" Precision="3"/>
        <Property Name="Dto" Type="Edm.DateTimeOffset" Precision="3"/>
        <Property Name="Dur" Type="Edm.Duration" Precision="3"/>
        <Property Name="Uid" Type="Edm.Guid"/>
        <Property Name="Status" Type="O.Status"/>
        <Property Name="Color" Type="O.Color"/>
        <Property Name="Tags" Type="Collection(Edm.String)" Nullable="false"/>
        <Property Name="Scores" Type="Collection(Edm.Int32)" Nullable="false"/>
      </EntityType>
      <EntityContainer Name="Service">
        <EntitySet Name="Things" EntityType="O.Thing"/>
      </EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    /// ``metadata`` parsed.
    public static func model() throws -> Model {
        try MetadataParser().parse(metadata)
    }

    /// A V4 JSON collection (`{"value":[…]}`) of `count` rows with keys 1…count, the same for
    /// the same seed: about 15% nulls per property, zeros, negatives, values near the ends of
    /// each type's range, strings with spaces, cases, non-ASCII letters, `%`, `_` and `'`,
    /// DateTimeOffsets in several offsets (some near midnight, so that the local date differs
    /// from the UTC one), empty and non-empty collections.
    public static func rows(seed: UInt64, count: Int) -> String {
        var random = OracleRandom(seed: seed ^ 0x0DDB_A11C_AFE5_EED5)
        var lines: [String] = []
        if count > 0 {
            for id in 1...count { lines.append(row(id: id, &random)) }
        }
        return "{\"value\":[\n" + lines.joined(separator: ",\n") + "\n]}"
    }

    private static func row(id: Int, _ random: inout OracleRandom) -> String {
        var members: [(String, String)] = [("ID", String(id))]
        func add(_ name: String, _ value: (inout OracleRandom) -> String) {
            members.append((name, random.chance(0.15) ? "null" : value(&random)))
        }
        add("Str") { random in OraclePools.json(string: OraclePools.dataString(&random)) }
        add("Flag") { random in random.chance(0.5) ? "true" : "false" }
        add("U8") { random in
            random.chance(0.3) ? random.pick(["0", "1", "127", "128", "255"]) : String(random.int(0...255))
        }
        add("I8") { random in
            random.chance(0.3) ? random.pick(["-128", "-1", "0", "1", "127"]) : String(random.int(-128...127))
        }
        add("I16") { random in
            random.chance(0.3) ? random.pick(["-32768", "-1", "0", "300", "32767"]) : String(random.int(-1000...1000))
        }
        add("I32") { random in
            random.chance(0.15) ? random.pick(OraclePools.int32Boundaries) : String(random.int(-50...50))
        }
        add("I64") { random in
            random.chance(0.15) ? random.pick(OraclePools.int64Boundaries) : String(random.int(-100...100))
        }
        add("Sgl") { random in
            // Multiples of 1/8: exact in Single, Double and decimal text alike.
            random.chance(0.3) ? random.pick(OraclePools.singleValues) : "\(Double(random.int(-800...800)) / 8)"
        }
        add("Dbl") { random in
            random.chance(0.5) ? random.pick(OraclePools.doubleValues) : "\(Double(random.int(-10_000...10_000)) / 100)"
        }
        add("Dec") { random in
            random.chance(0.4) ? random.pick(OraclePools.decimalValues) : randomDecimal(&random)
        }
        add("Dt") { random in
            let date = random.chance(0.2) ? random.pick(OraclePools.dateValues) : randomDate(&random, years: 1900...2100)
            return "\"" + date + "\""
        }
        add("Tod") { random in "\"" + randomTime(&random) + "\"" }
        add("Dto") { random in
            if random.chance(0.05) { return "\"" + random.pick(OraclePools.dateTimeOffsetBoundaries) + "\"" }
            let date = randomDate(&random, years: 1990...2030)
            return "\"" + date + "T" + randomTime(&random, nearMidnight: 0.3) + random.pick(OraclePools.offsets) + "\""
        }
        add("Dur") { random in "\"" + randomDuration(&random) + "\"" }
        add("Uid") { random in
            "\"" + (random.chance(0.7) ? random.pick(OraclePools.guids) : randomGuid(&random)) + "\""
        }
        add("Status") { random in "\"" + random.pick(["New", "Open", "Closed"]) + "\"" }
        add("Color") { random in "\"" + random.pick(OraclePools.colorValues) + "\"" }
        // Collections are never null: empty or with a few items.
        let tagCount = random.chance(0.25) ? 0 : random.int(1...4)
        var tags: [String] = []
        for _ in 0..<tagCount { tags.append(OraclePools.json(string: random.pick(OraclePools.tagValues))) }
        members.append(("Tags", "[" + tags.joined(separator: ",") + "]"))
        let scoreCount = random.chance(0.25) ? 0 : random.int(1...4)
        var scores: [String] = []
        for _ in 0..<scoreCount { scores.append(String(random.int(-5...10))) }
        members.append(("Scores", "[" + scores.joined(separator: ",") + "]"))
        return "{" + members.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    /// A decimal of up to 4 fractional digits without trailing zeros (the store keeps decimals
    /// in canonical form, so `1.50` would come back as `1.5`).
    private static func randomDecimal(_ random: inout OracleRandom) -> String {
        let whole = random.int(-1000...1000)
        var fraction = ""
        for _ in 0..<random.int(0...4) { fraction.append(Character(String(random.int(0...9)))) }
        while fraction.hasSuffix("0") { fraction.removeLast() }
        if fraction.isEmpty { return String(whole) }
        // -0.25 has a whole part of 0 and a sign.
        let sign = whole == 0 && random.chance(0.5) ? "-" : ""
        return sign + String(whole) + "." + fraction
    }

    private static func randomDate(_ random: inout OracleRandom, years: ClosedRange<Int>) -> String {
        let year = random.int(years)
        let month = random.int(1...12)
        let day = random.int(1...DateValue.daysInMonth(month, year: year))
        return DateValue(year: year, month: month, day: day).description
    }

    /// `HH:MM:SS` with an optional fraction of up to 3 digits (no trailing zeros).
    private static func randomTime(_ random: inout OracleRandom, nearMidnight: Double = 0.1) -> String {
        let hour = random.chance(nearMidnight) ? random.pick([0, 1, 22, 23]) : random.int(0...23)
        let fraction = random.chance(0.3) ? random.pick(["5", "25", "125", "999", "001"]) : ""
        return TimeOfDayValue(hour: hour, minute: random.int(0...59), second: random.int(0...59), fraction: fraction)
            .description
    }

    /// A duration in the normalized form the store reads back (hours below 24, minutes and
    /// seconds below 60), never a negative zero.
    private static func randomDuration(_ random: inout OracleRandom) -> String {
        let days = random.chance(0.5) ? 0 : random.int(0...400)
        let hours = random.chance(0.3) ? 0 : random.int(0...23)
        let minutes = random.chance(0.3) ? 0 : random.int(0...59)
        let seconds = random.chance(0.5) ? 0 : random.int(0...59)
        let fraction = random.chance(0.2) ? random.pick(["5", "25", "001"]) : ""
        let zero = days == 0 && hours == 0 && minutes == 0 && seconds == 0 && fraction.isEmpty
        let negative = !zero && random.chance(0.2)
        return DurationValue(negative: negative, days: days, hours: hours, minutes: minutes, seconds: seconds,
                             fraction: fraction).description
    }

    private static func randomGuid(_ random: inout OracleRandom) -> String {
        let hex = Array("0123456789abcdef")
        var text = ""
        for index in 0..<32 {
            if index == 8 || index == 12 || index == 16 || index == 20 { text.append("-") }
            text.append(hex[random.int(0...15)])
        }
        return text
    }
}

/// Values shared by the rows and the generator's literals, so that comparisons with literals
/// find rows.
enum OraclePools {
    static let strings: [String] = [
        "", " ", "a", "A", "b", "abc", "ABC", "Abc", "apple", "Apple pie", "banana", "Banana", "hello world",
        "Hello World", " padded ", "  two", "trail  ", "it's", "''", "'", "100%", "50%_off", "%", "_",
        "under_score", "a_b%c", "Zürich", "zürich", "café", "CAFÉ", "naïve", "ÄÖÜ", "Ωmega", "日本語", "12", "-3",
        "1.5", " 12", "true", "false", "2020-01-31", "12:30:15", "P1D", "00000000-0000-0000-0000-000000000001",
        "2020-01-31T10:00:00Z", "12x", "x",
    ]
    /// Strings whose length differs by the way characters are counted (a code point outside
    /// the BMP, a combining mark): rare, as the oracle refuses `length`/`indexof`/`substring`
    /// on them.
    static let ambiguousStrings: [String] = ["smile 🙂", "e\u{301}te"]

    static func dataString(_ random: inout OracleRandom) -> String {
        random.chance(0.01) ? random.pick(ambiguousStrings) : random.pick(strings)
    }

    /// Literals for comparisons with whole strings.
    static let stringLiterals: [String] = [
        "a", "abc", "ABC", "Apple pie", "banana", "it's", "100%", "_", "Zürich", "café", "12", "", " ", "zz",
        "hello world", "x", "apple", "'", "日本語", "naïve", " padded ",
    ]
    /// Literals for `contains`, `startswith`, `endswith`, `indexof`.
    static let fragments: [String] = [
        "a", "A", "ap", "an", "b", "ll", "%", "_", "'", "é", "ü", " ", "", "12", "o w", "na", "pie", "Z", "e",
    ]
    static let tagValues: [String] = ["a", "b", "apple", "Banana", "x y", "é", ""]

    static let int32Boundaries = ["2147483647", "-2147483648", "0", "1", "-1", "100000", "-100000"]
    static let int64Boundaries = [
        "9223372036854775807", "-9223372036854775808", "4611686018427387904", "-4611686018427387904",
        "5000000000", "-5000000000", "0",
    ]
    static let singleValues = ["0", "0.5", "-0.5", "1.5", "2.5", "-2.5", "0.125", "1000000", "3.75", "-100"]
    static let doubleValues = [
        "0.1", "1.5", "-2.75", "3.3", "1e10", "-1e-5", "123.456", "2.5", "-2.5", "0.5", "-0.5", "0", "1", "-1",
        "7.25", "99.99", "1e-7",
    ]
    static let decimalValues = [
        "0", "1", "-1", "1.5", "12.25", "-0.0001", "99999999999999.9999", "3.1416", "100", "-42.5", "0.5", "2.5",
        "-2.5", "1234.5678",
    ]
    static let dateValues = ["0001-01-01", "9999-12-31", "2000-02-29", "2024-12-31", "1970-01-01", "2020-01-31"]
    static let offsets = ["Z", "+02:00", "-05:30", "+14:00", "-12:00", "+00:00", "+05:45", "-01:00"]
    static let dateTimeOffsetBoundaries = [
        "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z", "2020-01-01T00:30:00+02:00", "2019-12-31T23:30:00-05:00",
    ]
    static let guids = [
        "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000001",
        "ffffffff-ffff-ffff-ffff-ffffffffffff", "0123abcd-4567-89ab-cdef-0123456789ab",
        "a0a0a0a0-b1b1-c2c2-d3d3-e4e4e4e4e4e4",
    ]
    static let colorValues = ["Red", "Green", "Blue", "Red,Green", "Red,Blue", "Green,Blue", "Red,Green,Blue"]

    /// `text` as a JSON string.
    static func json(string text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default:
                if scalar.value < 0x20 {
                    let hex = Array("0123456789abcdef")
                    out += "\\u00" + String(hex[Int(scalar.value >> 4)]) + String(hex[Int(scalar.value & 0xF)])
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
