import Foundation
import Testing
@testable import ODataCore

/// Issue 19, defects 3, 4 and 6: what the model forbids is refused with an error that names the
/// problem — keys, function parameters, calendar dates, leap seconds, enum members, undeclared
/// names, nulls, lengths and digits.
@Suite struct BadInputTests {
    static let staticService = "v4/olingo4-client-core-staticservice-metadata.xml"
    static let ns = "Microsoft.Test.OData.Services.ODataWCFService"

    static func model(_ file: String = staticService) throws -> Model {
        try MetadataParser().parse(try Conformance.data("metadata/" + file))
    }

    /// The message of the error binding `url` throws, or nil when it binds.
    func refusal(_ url: String, version: ODataVersion = .v401, _ file: String = staticService) throws -> String? {
        let model = try Self.model(file)
        do {
            let parsed = try URLParser(version: version).parse(url)
            _ = try RequestBinder(model: model).bind(parsed, input: url)
            return nil
        } catch let error as SyntaxError {
            return error.message
        } catch let error as BindingError {
            return error.message
        }
    }

    @Test func keysMustFitTheKeyExactly() throws {
        let detail = "The key of \(Self.ns).OrderDetail is OrderID, ProductID; "
        #expect(try refusal("OrderDetails(OrderID=7)") == detail + "ProductID is missing")
        #expect(try refusal("OrderDetails(ProductID=7)") == detail + "OrderID is missing")
        #expect(try refusal("OrderDetails(OrderID=7,ProductID=1,Quantity=2)") == detail + "Quantity is not a key property")
        #expect(try refusal("OrderDetails(OrderID=7,OrderID=1)") == detail + "OrderID is given twice")
        #expect(try refusal("OrderDetails(7)") == detail + "a compound key names each part (Name=value)")
        #expect(try refusal("OrderDetails(OrderID=7,ProductID=1)") == nil)
        let product = "The key of \(Self.ns).Product is ProductID; "
        #expect(try refusal("Products('five')") == product + "'five' is not an Edm.Int32 for ProductID")
        #expect(try refusal("Products(5)") == nil)
        #expect(try refusal("Products(ProductID=5)") == nil)
        // After a navigation a referential constraint may supply key parts: left to the store.
        #expect(try refusal("Customers(1)/Orders(7)") == nil)
        #expect(try refusal("Products(ProductID=@p)?@p=5") == nil)
    }

    @Test func functionParametersMustFitTheSignature() throws {
        let signature = "its parameters are start (Edm.Int32), count (Edm.Int32)"
        #expect(try refusal("GetBossEmails(start=0)") == "GetBossEmails needs the parameter count (Edm.Int32); \(signature)")
        #expect(try refusal("GetBossEmails(start=0,count=1,top=2)") == "GetBossEmails has no parameter top; \(signature)")
        #expect(try refusal("GetBossEmails(start=0,start=1)") == "GetBossEmails: the parameter start is given twice")
        #expect(try refusal("GetBossEmails(start='x',count=1)") == "GetBossEmails: 'x' is not an Edm.Int32 for start")
        #expect(try refusal("GetBossEmails(start=0,count=1)") == nil)
        #expect(try refusal("GetBossEmails(start=@s,count=1)?@s=0") == nil)
        // A bound function's binding parameter is not one the URL gives.
        let bound = "Accounts(101)/\(Self.ns).GetDefaultPI()"
        #expect(try refusal(bound) == nil)
        #expect(try refusal("Accounts(101)/\(Self.ns).GetDefaultPI(x=1)")?.contains("has no parameter x") == true)
    }

    /// A parameter annotated `Core.OptionalParameter` may be left out even when it is not
    /// nullable; 4.01 writes an enum argument as a plain string (`color='Red'`), 4.0 may not.
    @Test func optionalParametersAndPlainStringEnumArguments() throws {
        let csdl = """
            <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.01">
              <edmx:DataServices><Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Shop">
                <EnumType Name="Color"><Member Name="Red"/><Member Name="Green"/></EnumType>
                <Function Name="Search"><Parameter Name="Text" Type="Edm.String" Nullable="false"/>
                  <Parameter Name="Limit" Type="Edm.Int32" Nullable="false"><Annotation Term="Core.OptionalParameter"/></Parameter>
                  <ReturnType Type="Collection(Edm.String)"/></Function>
                <Function Name="Paint"><Parameter Name="Color" Type="Shop.Color" Nullable="false"/><ReturnType Type="Edm.String"/></Function>
                <EntityContainer Name="C"><FunctionImport Name="Search" Function="Shop.Search"/>
                  <FunctionImport Name="Paint" Function="Shop.Paint"/></EntityContainer>
              </Schema></edmx:DataServices></edmx:Edmx>
            """
        let model = try MetadataParser().parse(csdl)
        // The service's version decides: a 4.0 service takes enum members in their own form only.
        let model40 = try MetadataParser().parse(csdl.replacingOccurrences(of: "Version=\"4.01\"", with: "Version=\"4.0\""))
        func refusal(_ url: String, version: ODataVersion = .v401) -> String? {
            do {
                _ = try RequestBinder(model: version == .v4 ? model40 : model).bind(try URLParser(version: version).parse(url), input: url)
                return nil
            } catch let error as SyntaxError {
                return error.message
            } catch let error as BindingError {
                return error.message
            } catch {
                return "\(error)"
            }
        }
        // Written back as CSDL, the parameter stays optional.
        let written = try MetadataParser().parse(MetadataWriter().v4(model))
        #expect(written.functions("Shop.Search").first?.parameters.last?.mayBeOmitted == true)
        #expect(written.functions("Shop.Search").first?.parameters.first?.mayBeOmitted == false)
        #expect(refusal("Search(Text='a')") == nil)
        #expect(refusal("Search(Text='a',Limit=5)") == nil)
        #expect(refusal("Search(Limit=5)")?.hasPrefix("Search needs the parameter Text (Edm.String)") == true)
        #expect(refusal("Paint(Color=Shop.Color'Red')") == nil)
        #expect(refusal("Paint(Color='Green')") == nil)
        #expect(refusal("Paint(Color='Purple')") == "Shop.Color has no member Purple; its members are Red, Green")
        #expect(refusal("Paint(Color='Green')", version: .v4) != nil)
    }

    @Test func datesTheCalendarDoesNotHaveAreRefusedByName() throws {
        #expect(try refusal("People?$filter=Birthday eq 2023-02-29") == "February 2023 has 28 days: 2023-02-29 is not a date")
        #expect(try refusal("Customers?$filter=Birthday eq 2024-02-29T00:00:00Z") == nil)
        #expect(try refusal("People?$filter=Birthday eq 2011-04-31T10:00:00Z")
                == "April 2011 has 30 days: 2011-04-31 is not a date")
        #expect(try refusal("People?$filter=Birthday eq 1900-02-29") == "February 1900 has 28 days: 1900-02-29 is not a date")
        // V2 `datetime'…'` and typed payload text say the same.
        #expect(try refusal("Products?$filter=ReleaseDate eq datetime'2023-02-29T00:00:00'", version: .v2,
                            "v2/odata-rw-v2-ODataDemo.xml") == "February 2023 has 28 days: 2023-02-29 is not a date")
        do {
            _ = try Literal.parsePayloadValue("2023-02-29", as: .date)
            Issue.record("2023-02-29 was accepted")
        } catch {
            #expect(error.message == "Not a valid Edm.Date value: February 2023 has 28 days: 2023-02-29 is not a date")
        }
        #expect(try Literal.parsePayloadValue("2024-02-29", as: .date) == .date(DateValue(year: 2024, month: 2, day: 29)))
        #expect(try Literal.parsePayloadValue("2000-02-29", as: .date) == .date(DateValue(year: 2000, month: 2, day: 29)))
        let reader = V4JSONReader(model: try Self.model())
        #expect {
            _ = try reader.readValue(Array(#"{"value":"2020-02-30"}"#.utf8), type: TypeReference(name: "Edm.Date"))
        } throws: { error in
            (error as? PayloadError)?.message == "'2020-02-30' is not a valid Edm.Date (February 2020 has 29 days: 2020-02-30 is not a date)"
        }
    }

    /// The ABNF's `second` allows 60 (a leap second) in both forms; both are accepted alike
    /// (before, a time of day refused it while a date-time took it).
    @Test func leapSecondsAreAcceptedAlikeInEveryTemporalType() throws {
        #expect(try refusal("Customers?$filter=Birthday eq 2016-12-31T23:59:60Z") == nil)
        #expect(Literal.format(.primitive(try Literal.parsePayloadValue("23:59:60", as: .timeOfDay))) == "23:59:60")
        #expect(Literal.format(.primitive(try Literal.parsePayloadValue("2016-12-31T23:59:60Z", as: .dateTimeOffset)))
                == "2016-12-31T23:59:60Z")
        #expect(throws: SyntaxError.self) { try Literal.parsePayloadValue("23:59:61", as: .timeOfDay) }
        #expect(throws: SyntaxError.self) { try Literal.parsePayloadValue("2016-12-31T23:59:61Z", as: .dateTimeOffset) }
    }

    @Test func enumLiteralsNameMembersOfTheirType() throws {
        let color = "\(Self.ns).Color"
        #expect(try refusal("Products?$filter=SkinColor eq \(color)'Purple'")
                == "\(color) has no member Purple; its members are Red, Green, Blue")
        #expect(try refusal("Products?$filter=SkinColor eq \(color)'Red,Blue'")
                == "\(color) is not a flags type: one member only")
        #expect(try refusal("Products?$filter=SkinColor eq \(Self.ns).Colour'Red'")
                == "\(Self.ns).Colour is not an enum type of the service")
        #expect(try refusal("Products?$filter=SkinColor eq \(color)'Red'") == nil)
        #expect(try refusal("Products?$filter=SkinColor eq \(color)'2'") == nil)
        #expect(try refusal("Products?$filter=UserAccess has \(Self.ns).AccessLevel'Read,Write'") == nil)
    }

    // MARK: Values written

    static let writeModel = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">
        <edmx:DataServices><Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="W">
          <EnumType Name="Size"><Member Name="S"/><Member Name="L"/></EnumType>
          <ComplexType Name="Address"><Property Name="City" Type="Edm.String" MaxLength="5"/></ComplexType>
          <EntityType Name="Item">
            <Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
            <Property Name="Name" Type="Edm.String" MaxLength="10" Nullable="false"/>
            <Property Name="Price" Type="Edm.Decimal" Precision="5" Scale="2"/>
            <Property Name="Ratio" Type="Edm.Decimal" Precision="3" Scale="variable"/>
            <Property Name="Measure" Type="Edm.Decimal" Precision="3" Scale="floating"/>
            <Property Name="Blob" Type="Edm.Binary" MaxLength="2"/>
            <Property Name="Size" Type="W.Size"/>
            <Property Name="Address" Type="W.Address"/>
            <Property Name="Tags" Type="Collection(Edm.String)" MaxLength="3"/>
            <NavigationProperty Name="Parts" Type="Collection(W.Part)"/>
          </EntityType>
          <EntityType Name="Special" BaseType="W.Item"><Property Name="Extra" Type="Edm.String"/></EntityType>
          <EntityType Name="Part" OpenType="true">
            <Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
          </EntityType>
          <EntityContainer Name="C"><EntitySet Name="Items" EntityType="W.Item"/><EntitySet Name="Parts" EntityType="W.Part"/></EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    /// The problem `checkWritable` finds in a JSON body for `W.Item`, as "message @ path".
    func problem(_ json: String) throws -> String? {
        let model = try MetadataParser().parse(Self.writeModel)
        let entity = try V4JSONReader(model: model).readEntity(Array(json.utf8), entityType: "W.Item")
        do {
            try model.checkWritable(entity, as: "W.Item")
            return nil
        } catch {
            return error.message + " @ " + error.path
        }
    }

    @Test func undeclaredNamesAreRefusedUnlessTheTypeIsOpen() throws {
        #expect(try problem(#"{"ID":1,"Name":"a","Nmae":"x"}"#) == "W.Item has no property Nmae @ Nmae")
        #expect(try problem(#"{"ID":1,"Address":{"City":"a","Zip":"1"}}"#) == "W.Address has no property Zip @ Address.Zip")
        #expect(try problem(#"{"ID":1,"Prts@odata.bind":["Parts(1)"]}"#) == "W.Item has no navigation property Prts @ Prts")
        #expect(try problem(#"{"ID":1,"Parts":[{"ID":2,"Anything":"goes"}]}"#) == nil)
        #expect(try problem(#"{"ID":1,"Extra":"x"}"#) == "W.Item has no property Extra @ Extra")
        #expect(try problem(##"{"@odata.type":"#W.Special","ID":1,"Extra":"x"}"##) == nil)
        #expect(try problem(##"{"@odata.type":"#W.Part","ID":1}"##) == "W.Part is not W.Item or derived from it @ @odata.type")
        #expect(try problem(##"{"@odata.type":"#W.Nope","ID":1}"##) == "W.Nope is not a type of the service @ @odata.type")
    }

    /// A body may repeat the key; a date-time key is the same whether written without an
    /// offset (V2 `datetime'…'`), with `Z` or with another offset for the same instant.
    @Test func aBodyMayRepeatTheKeyInAnyFormOfTheSameInstant() throws {
        let model = try MetadataParser().parse(Self.writeModel)
        let noon = DateTimeOffsetValue(date: DateValue(year: 2020, month: 1, day: 1), time: TimeOfDayValue(hour: 12, minute: 0), offsetMinutes: nil)
        var utc = noon
        utc.offsetMinutes = 0
        let berlin = DateTimeOffsetValue(date: DateValue(year: 2020, month: 1, day: 1), time: TimeOfDayValue(hour: 13, minute: 0), offsetMinutes: 60)
        let later = DateTimeOffsetValue(date: DateValue(year: 2020, month: 1, day: 1), time: TimeOfDayValue(hour: 13, minute: 0), offsetMinutes: 0)
        func check(_ body: PrimitiveValue) -> String? {
            var entity = Entity()
            entity["Since"] = .primitive(body)
            do {
                try model.checkKeyUnchanged(entity, key: ["Since": .dateTime(noon)])
                return nil
            } catch {
                return error.message
            }
        }
        #expect(check(.dateTime(noon)) == nil)
        #expect(check(.dateTimeOffset(utc)) == nil)
        #expect(check(.dateTimeOffset(berlin)) == nil)
        #expect(check(.dateTimeOffset(later)) == "Since is part of the key (datetime'2020-01-01T12:00:00') and cannot change to 2020-01-01T13:00:00Z")
    }

    @Test func facetsBoundWhatIsStored() throws {
        #expect(try problem(#"{"ID":1,"Name":"0123456789"}"#) == nil)
        #expect(try problem(#"{"ID":1,"Name":"0123456789A"}"#) == "The text has 11 characters; MaxLength is 10 @ Name")
        #expect(try problem(#"{"ID":1,"Name":"ééééééééé"}"#) == nil)
        #expect(try problem(#"{"ID":1,"Name":null}"#) == "Name may not be null @ Name")
        #expect(try problem(#"{"ID":1,"Price":999.99}"#) == nil)
        #expect(try problem(#"{"ID":1,"Price":1.50}"#) == nil)
        #expect(try problem(#"{"ID":1,"Price":1.5000}"#) == nil)
        #expect(try problem(#"{"ID":1,"Price":1.505}"#) == "1.505 has 3 digits after the point; Scale is 2 @ Price")
        #expect(try problem(#"{"ID":1,"Price":1000}"#)
                == "1000 has 4 digits before the point; Precision 5 and Scale 2 allow 3 @ Price")
        let huge = String(repeating: "9", count: 100_000)
        #expect(try problem(#"{"ID":1,"Price":\#(huge)}"#)?.hasSuffix("allow 3 @ Price") == true)
        #expect(try problem(#"{"ID":1,"Ratio":0.123}"#) == nil)
        #expect(try problem(#"{"ID":1,"Ratio":12.34}"#) == "12.34 has more than 3 digits (Precision 3) @ Ratio")
        // Scale floating counts significant digits; the exponent may be anything.
        #expect(try problem(#"{"ID":1,"Measure":1.25E+100}"#) == nil)
        #expect(try problem(#"{"ID":1,"Measure":150000}"#) == nil)
        #expect(try problem(#"{"ID":1,"Measure":0.000125}"#) == nil)
        #expect(try problem(#"{"ID":1,"Measure":1.255}"#) == "1.255 has 4 significant digits; Precision is 3 (Scale floating) @ Measure")
        #expect(try problem(#"{"ID":1,"Blob":"AAEC"}"#) == "The value has 3 bytes; MaxLength is 2 @ Blob")
        #expect(try problem(#"{"ID":1,"Address":{"City":"Berlin"}}"#)
                == "The text has 6 characters; MaxLength is 5 @ Address.City")
        #expect(try problem(#"{"ID":1,"Tags":["abc","abcd"]}"#) == "The text has 4 characters; MaxLength is 3 @ Tags[1]")
        #expect(try problem(#"{"ID":1,"Size":"M"}"#) == "W.Size has no member M @ Size")
        #expect(try problem(#"{"ID":1,"Size":"L"}"#) == nil)
    }
}
