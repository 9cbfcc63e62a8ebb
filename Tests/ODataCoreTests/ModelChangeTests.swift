import Foundation
import Testing

@testable import ODataCore

/// Issue 38's classification of metadata changes (SPEC §14): additive changes, breaking ones
/// and neutral ones, each named, between two versions of a V4 and of a V2 service.
@Suite struct ModelChangeTests {
    static let v4 = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
        <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Shop">
          <EnumType Name="Color"><Member Name="Red"/><Member Name="Blue"/></EnumType>
          <EntityType Name="Product"><Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
            <Property Name="Name" Type="Edm.String" MaxLength="40"/>
            <Property Name="Price" Type="Edm.Decimal"/>
            <Property Name="Color" Type="Shop.Color"/>
            <NavigationProperty Name="Category" Type="Shop.Category"/>
          </EntityType>
          <EntityType Name="Category"><Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
          </EntityType>
          <Function Name="TopProducts"><ReturnType Type="Collection(Shop.Product)"/></Function>
          <EntityContainer Name="Container">
            <EntitySet Name="Products" EntityType="Shop.Product"/>
            <EntitySet Name="Categories" EntityType="Shop.Category"/>
            <FunctionImport Name="TopProducts" Function="Shop.TopProducts" EntitySet="Products"/>
          </EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    static let v2 = """
        <edmx:Edmx xmlns:edmx="http://schemas.microsoft.com/ado/2007/06/edmx" Version="1.0">
        <edmx:DataServices xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"
          m:DataServiceVersion="2.0">
        <Schema xmlns="http://schemas.microsoft.com/ado/2008/09/edm" Namespace="Shop">
          <EntityType Name="Product"><Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
            <Property Name="Name" Type="Edm.String" MaxLength="40"/>
            <Property Name="Price" Type="Edm.Decimal"/>
          </EntityType>
          <EntityContainer Name="Container" m:IsDefaultEntityContainer="true">
            <EntitySet Name="Products" EntityType="Shop.Product"/>
          </EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    static func model(_ text: String) throws -> Model { try MetadataParser().parse(Data(text.utf8)) }

    static func changes(_ base: String, _ edits: [(String, String)]) throws -> [String] {
        var changed = base
        for (old, new) in edits {
            #expect(changed.contains(old), "the edit's anchor \(old) is in the document")
            changed = changed.replacingOccurrences(of: old, with: new)
        }
        return try model(changed).changes(since: model(base)).map(\.description)
    }

    @Test func theSameModelHasNoChanges() throws {
        #expect(try Self.model(Self.v4).changes(since: Self.model(Self.v4)).isEmpty)
        #expect(try Self.model(Self.v2).changes(since: Self.model(Self.v2)).isEmpty)
    }

    @Test func additiveChangesAreNamed() throws {
        let found = try Self.changes(
            Self.v4,
            [
                (
                    #"<Property Name="Price" Type="Edm.Decimal"/>"#,
                    #"<Property Name="Price" Type="Edm.Decimal"/><Property Name="Note" Type="Edm.String"/>"#
                        + #"<NavigationProperty Name="Related" Type="Collection(Shop.Product)"/>"#
                ),
                (#"<Member Name="Blue"/>"#, #"<Member Name="Blue"/><Member Name="Green"/>"#),
                (
                    #"<EntitySet Name="Categories" EntityType="Shop.Category"/>"#,
                    #"<EntitySet Name="Categories" EntityType="Shop.Category"/>"#
                        + #"<EntitySet Name="Suppliers" EntityType="Shop.Supplier"/>"#
                ),
                (
                    #"<Function Name="TopProducts">"#,
                    #"<EntityType Name="Supplier"><Key><PropertyRef Name="ID"/></Key>"#
                        + #"<Property Name="ID" Type="Edm.Int32" Nullable="false"/></EntityType>"#
                        + #"<Function Name="TopProducts">"#
                ),
            ])
        #expect(
            found == [
                "additive: EntitySet Suppliers added",
                "additive: Property Shop.Product/Note added",
                "additive: Navigation property Shop.Product/Related added",
                "additive: EntityType Shop.Supplier added",
                "additive: Member Green of Shop.Color added",
            ], "\(found)")
    }

    @Test func breakingChangesAreNamed() throws {
        let found = try Self.changes(
            Self.v4,
            [
                (#"<Property Name="Price" Type="Edm.Decimal"/>"#, ""),
                (
                    #"<Property Name="Name" Type="Edm.String" MaxLength="40"/>"#,
                    #"<Property Name="Name" Type="Edm.String" MaxLength="20" Nullable="false"/>"#
                        + #"<Property Name="SKU" Type="Edm.String" Nullable="false"/>"#
                ),
                (
                    #"<EntityType Name="Category"><Key><PropertyRef Name="ID"/></Key>"#,
                    #"<EntityType Name="Category"><Key><PropertyRef Name="Code"/></Key>"#
                        + #"<Property Name="Code" Type="Edm.String" Nullable="false"/>"#
                ),
                (#"<Member Name="Blue"/>"#, ""),
                (#"<EntitySet Name="Products" EntityType="Shop.Product"/>"#, ""),
                (#"<FunctionImport Name="TopProducts" Function="Shop.TopProducts" EntitySet="Products"/>"#, ""),
            ])
        #expect(
            found == [
                "breaking: EntitySet Products removed",
                "breaking: Key of Shop.Category changed from (ID) to (Code)",
                "breaking: Non-nullable property Shop.Category/Code added",
                "breaking: Property Shop.Product/Name made non-nullable",
                "breaking: Property Shop.Product/Name limited to 20 characters (was 40)",
                "breaking: Property Shop.Product/Price removed",
                "breaking: Non-nullable property Shop.Product/SKU added",
                "breaking: Member Blue of Shop.Color removed",
                "neutral: Operation Container/TopProducts removed",
            ], "\(found)")
        // A member inserted before another renumbers it (members without values count from 0):
        // the store keeps numbers, so that is breaking, not only an added member.
        let renumbered = try Self.changes(
            Self.v4, [(#"<Member Name="Red"/>"#, #"<Member Name="Red"/><Member Name="Green"/>"#)])
        #expect(
            renumbered == [
                "breaking: Member Blue of Shop.Color now has the value 2, not 1",
                "additive: Member Green of Shop.Color added",
            ], "\(renumbered)")
        // Loosening nullability changes the store's column too.
        let loosened = try Self.changes(
            Self.v4,
            [
                (
                    #"<Property Name="Name" Type="Edm.String" MaxLength="40"/>"#,
                    #"<Property Name="Name" Type="Edm.String"/>"#
                ),
                (
                    #"<EntityType Name="Category"><Key><PropertyRef Name="ID"/></Key>"#,
                    #"<EntityType Name="Category" OpenType="true"><Key><PropertyRef Name="ID"/></Key>"#
                ),
            ])
        #expect(loosened == ["breaking: Shop.Category became an open type"], "\(loosened)")
    }

    @Test func aRetypedPropertyAndARemovedSetAreBreakingInV2() throws {
        let found = try Self.changes(
            Self.v2,
            [
                (
                    #"<Property Name="Price" Type="Edm.Decimal"/>"#,
                    #"<Property Name="Price" Type="Edm.String"/><Property Name="Note" Type="Edm.String"/>"#
                )
            ])
        #expect(
            found == [
                "breaking: Property Shop.Product/Price retyped from Edm.Decimal to Edm.String",
                "additive: Property Shop.Product/Note added",
            ], "\(found)")
        let removed = try Self.changes(Self.v2, [(#"<EntitySet Name="Products" EntityType="Shop.Product"/>"#, "")])
        #expect(removed == ["breaking: EntitySet Products removed"], "\(removed)")
        // The subject names what a report or a `MetadataChanged` error points at.
        let subjects = try Self.model(
            Self.v2.replacingOccurrences(of: #"<Property Name="Price" Type="Edm.Decimal"/>"#, with: "")
        )
        .changes(since: Self.model(Self.v2)).map(\.subject)
        #expect(subjects == ["Shop.Product/Price"])
    }
}
