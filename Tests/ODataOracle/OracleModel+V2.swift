import Foundation

extension OracleModel {
    /// The V2 model: V2's primitive types (DateTime, DateTimeOffset, Time among them), a complex
    /// type and a derived entity type; V2 has no enums, no primitive collections, no lambdas.
    public static let metadataV2 = """
        <edmx:Edmx Version="1.0" xmlns:edmx="http://schemas.microsoft.com/ado/2007/06/edmx"
          xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata">
        <edmx:DataServices m:DataServiceVersion="2.0">
        <Schema Namespace="O" xmlns="http://schemas.microsoft.com/ado/2008/09/edm">
        <ComplexType Name="Address"><Property Name="City" Type="Edm.String"/>
          <Property Name="Zip" Type="Edm.String"/></ComplexType>
        <EntityType Name="Item"><Key><PropertyRef Name="ID"/></Key>
          <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
          <Property Name="B" Type="Edm.Boolean"/><Property Name="U8" Type="Edm.Byte"/>
          <Property Name="I8" Type="Edm.SByte"/><Property Name="I16" Type="Edm.Int16"/>
          <Property Name="I32" Type="Edm.Int32"/><Property Name="I64" Type="Edm.Int64"/>
          <Property Name="F" Type="Edm.Single"/><Property Name="D" Type="Edm.Double"/>
          <Property Name="M" Type="Edm.Decimal" Precision="38" Scale="6"/><Property Name="S" Type="Edm.String"/>
          <Property Name="N" Type="Edm.String"/><Property Name="G" Type="Edm.Guid"/>
          <Property Name="When" Type="Edm.DateTime"/><Property Name="At" Type="Edm.DateTimeOffset"/>
          <Property Name="Span" Type="Edm.Time"/><Property Name="Bin" Type="Edm.Binary"/>
          <Property Name="Addr" Type="O.Address"/></EntityType>
        <EntityType Name="Special" BaseType="O.Item"><Property Name="Extra" Type="Edm.Int32"/></EntityType>
        <EntityContainer Name="C" m:IsDefaultEntityContainer="true">
          <EntitySet Name="Items" EntityType="O.Item"/></EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    /// V2's DateTime values, as `/Date(ms)/` (UTC milliseconds) and as URL literals.
    static let dateTimes: [(payload: String, literal: String)] = [
        ("/Date(1577872800000)/", "2020-01-01T10:00:00"), ("/Date(1577836800000)/", "2020-01-01T00:00:00"),
        ("/Date(1709210096789)/", "2024-02-29T12:34:56.789"), ("/Date(946684799000)/", "1999-12-31T23:59:59"),
    ]
    static let spans = ["PT0S", "PT1H", "PT12H30M15S", "PT23H59M59.5S"]

    /// The items of one seed as a V2 JSON payload (`{"d":{"results":[…]}}`): Int64 and Decimal
    /// as strings, DateTime as `/Date(…)/`, as V2 producers write them.
    public static func rowsV2(seed: UInt64, items count: Int) -> String {
        var random = SeededRandom(seed: seed)
        var items: [String] = []
        for id in 1...count {
            let special = random.chance(25)
            var fields = ["\"__metadata\":{\"type\":\"O.\(special ? "Special" : "Item")\"}", "\"ID\":\(id)"]
            let decimals = ["0", "1.5", "-2.25", "7", "0.1", "123456789.123456"]
            fields += values(
                [
                    ("B", ["true", "false"], false), ("U8", bytes, false), ("I8", sbytes, false),
                    ("I16", int16s, false), ("I32", int32s, false), ("I64", int64s, true), ("F", singles, false),
                    ("D", doubles, false), ("M", decimals, true), ("S", strings, true), ("N", strings, true),
                    ("G", guids, true), ("When", dateTimes.map(\.payload), true), ("At", instants, true),
                    ("Span", spans, true), ("Bin", binaries, true),
                ], &random)
            fields.append(address(type: "O.Address", &random))
            if special { fields.append("\"Extra\":\(maybe(int32s, quoted: false, &random))") }
            items.append("{" + fields.joined(separator: ",") + "}")
        }
        return "{\"d\":{\"results\":[\(items.joined(separator: ",\n"))]}}"
    }
}
