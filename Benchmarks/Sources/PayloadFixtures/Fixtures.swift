import Foundation
import ODataCore

/// The benchmark workload: a V4 collection of products with ten properties of mixed types.
public enum Fixtures {
    public static let metadata = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="Bench" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EntityType Name="Product"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int64" Nullable="false"/>
        <Property Name="Name" Type="Edm.String"/>
        <Property Name="Description" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal" Precision="12" Scale="2"/>
        <Property Name="Quantity" Type="Edm.Int32"/>
        <Property Name="Rating" Type="Edm.Double"/>
        <Property Name="Active" Type="Edm.Boolean"/>
        <Property Name="Created" Type="Edm.DateTimeOffset"/>
        <Property Name="Code" Type="Edm.Guid"/>
        <Property Name="Category" Type="Edm.String"/>
      </EntityType>
      <EntityContainer Name="Container"><EntitySet Name="Products" EntityType="Bench.Product"/></EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    public static func model() throws -> Model { try MetadataParser().parse(metadata) }

    /// One entity's JSON, deterministic for an index.
    public static func entity(_ i: Int) -> String {
        let price = "\(i % 10_000).\(pad2(i % 100))"
        let day = 1 + i % 28
        let guid = String(format: "%08x-0000-4000-8000-%012x", i, i * 7919)
        return #"{"ID":\#(i),"Name":"Product number \#(i)","Description":"A sturdy item for field work, batch \#(i % 977), with a longer description text.","Price":\#(price),"Quantity":\#(i % 5000),"Rating":\#(Double(i % 50) / 10 + 0.25),"Active":\#(i % 3 == 0 ? "true" : "false"),"Created":"2024-03-\#(pad2(day))T10:\#(pad2(i % 60)):00Z","Code":"\#(guid)","Category":"Category \#(i % 40)"}"#
    }

    static func pad2(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }

    /// The whole collection response.
    public static func payload(count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count * 300)
        bytes += Array(#"{"@odata.context":"$metadata#Products","value":["#.utf8)
        for i in 0..<count {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes += Array(entity(i).utf8)
        }
        bytes += Array(#"],"@odata.nextLink":"Products?$skiptoken=end"}"#.utf8)
        return bytes
    }

    /// The same payload produced chunk by chunk on demand, never whole in memory.
    public static func chunks(count: Int, chunkSize: Int = 65_536) -> ChunkSequence {
        ChunkSequence(count: count, chunkSize: chunkSize)
    }
}

/// Produces the benchmark payload lazily, one chunk per `next()`.
public struct ChunkSequence: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let count: Int
    let chunkSize: Int

    public struct AsyncIterator: AsyncIteratorProtocol {
        let count: Int
        let chunkSize: Int
        var index = 0
        var started = false
        var finished = false

        public mutating func next() async -> [UInt8]? {
            if finished { return nil }
            var buffer: [UInt8] = []
            buffer.reserveCapacity(chunkSize + 512)
            if !started {
                started = true
                buffer += Array(#"{"@odata.context":"$metadata#Products","value":["#.utf8)
            }
            while index < count && buffer.count < chunkSize {
                if index > 0 { buffer.append(UInt8(ascii: ",")) }
                buffer += Array(Fixtures.entity(index).utf8)
                index += 1
            }
            if index == count {
                buffer += Array(#"],"@odata.nextLink":"Products?$skiptoken=end"}"#.utf8)
                finished = true
            }
            return buffer
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(count: count, chunkSize: chunkSize) }
}
