import Foundation

/// A complex or entity type written by `oodata generate`: a value type that reads itself from
/// the properties of a payload and writes itself back.
public protocol ODataStructure: ODataValueConvertible {
    /// The paths of the type's properties, for typed queries.
    associatedtype Fields: ODataFieldSet
    /// The qualified name of the type in the service's model (`Sales.Address`).
    static var odataTypeName: String { get }
    /// Reads the value's properties (and, for entities, expanded navigation properties).
    init(from reader: inout StructureReader) throws(TypedValueError)
    /// Writes the value's properties. Navigation properties are written only when
    /// `writer.includesNavigation` is set (deep inserts).
    func write(to writer: inout StructureWriter)
}

extension ODataStructure {
    public init(odataValue: Value) throws(TypedValueError) {
        switch odataValue {
        case .complex(let value), .entity(let value):
            var reader = StructureReader(typeName: Self.odataTypeName, properties: value.properties)
            self = try Self(from: &reader)
        default:
            throw TypedValueError.mismatch(Self.odataTypeName, odataValue).at(Self.odataTypeName)
        }
    }

    public func odataValue(as type: PrimitiveType?) -> Value {
        var writer = StructureWriter()
        write(to: &writer)
        return .complex(StructuredValue(typeName: Self.odataTypeName, properties: writer.properties))
    }
}

/// An entity type written by `oodata generate`.
public protocol ODataEntity: ODataStructure {
    /// The key of the entity type: one stored property per key property.
    associatedtype Key: ODataEntityKey
    /// The entity set that holds entities of this type, when the service has exactly one.
    static var defaultEntitySetName: String? { get }
    /// The entity's key, from its key properties.
    var key: Key { get }
    /// The entity's ETag as the service sent it; sent as `If-Match` with updates and deletes.
    var odataETag: String? { get set }
}

extension ODataEntity {
    /// Reads an entity of a payload or a local read: its properties, expanded navigation
    /// properties and ETag.
    @inlinable public init(entity: Entity) throws(TypedValueError) {
        var reader = StructureReader(
            typeName: Self.odataTypeName, properties: entity.properties, navigation: entity.navigation,
            etag: entity.control.etag)
        self = try Self(from: &reader)
    }

    /// The entity as a payload value: its structural properties, and its navigation
    /// properties when `includingNavigation` (a deep insert).
    public func entity(includingNavigation: Bool = false) -> Entity {
        var writer = StructureWriter(includesNavigation: includingNavigation)
        write(to: &writer)
        var entity = Entity(typeName: Self.odataTypeName, properties: writer.properties, navigation: writer.navigation)
        entity.control.etag = odataETag
        return entity
    }

    public func odataValue(as type: PrimitiveType?) -> Value {
        var writer = StructureWriter()
        write(to: &writer)
        return .entity(StructuredValue(typeName: Self.odataTypeName, properties: writer.properties))
    }
}

/// The key of an entity type, in the key's declared order.
public protocol ODataEntityKey: Sendable, Hashable {
    /// The key properties (or their aliases) with their values.
    var keyValues: [NamedValue] { get }
}

extension ODataEntityKey {
    /// The key predicate with its parentheses, as a person writes it: `(42)`, `('ALFKI')`,
    /// `(OrderID=1,ItemNo=2)`; literals in the syntax of `version`.
    public func predicate(version: ODataVersion) -> String {
        let values = keyValues
        if values.count == 1, let only = values.first {
            return "(" + QueryText.pathLiteral(only.value, version: version) + ")"
        }
        return "("
            + values.map { $0.name + "=" + QueryText.pathLiteral($0.value, version: version) }
            .joined(separator: ",") + ")"
    }
}

/// An enum type written by `oodata generate` (a Swift enum; a flags enum is an `OptionSet`).
public protocol ODataEnumeration: ODataValueConvertible {
    /// The qualified name of the enum type (`Sales.Color`).
    static var odataTypeName: String { get }
    /// Reads the value from member names (several for a flags enum) or numeric values.
    init(odataMembers members: [String]) throws(TypedValueError)
    /// The member names of the value, in declaration order.
    var odataMembers: [String] { get }
}

extension ODataEnumeration {
    public init(odataValue: Value) throws(TypedValueError) {
        switch odataValue {
        case .enumeration(let value):
            self = try Self(odataMembers: value.members)
        case .primitive(.string(let text)):
            // JSON carries enum values as strings: `"Red"` or `"Read,Write"`.
            self = try Self(
                odataMembers: text.split(separator: ",").map {
                    String($0).trimmingCharacters(in: .whitespaces)
                })
        default:
            throw TypedValueError.mismatch(Self.odataTypeName, odataValue).at(Self.odataTypeName)
        }
    }

    public func odataValue(as type: PrimitiveType?) -> Value {
        .enumeration(EnumValue(typeName: Self.odataTypeName, members: odataMembers))
    }
}

/// The boxed storage of a single-valued navigation or complex property in generated code, so
/// that types which refer to each other (`Employee.manager: Employee?`) stay value types.
public indirect enum Indirect<Wrapped: Sendable & Hashable>: Sendable, Hashable {
    case value(Wrapped)

    /// The boxed value.
    public var wrapped: Wrapped {
        switch self {
        case .value(let value): value
        }
    }
}

/// Reads the properties of one structured value, for the `init(from:)` of generated types.
public struct StructureReader: Sendable {
    /// The qualified name of the type being read, for error paths.
    public let typeName: String
    @usableFromInline let properties: [NamedValue]
    @usableFromInline let navigation: [NavigationValue]
    /// The ETag of the entity being read, if any.
    public let etag: String?
    /// Where the next property is expected: payloads usually list properties in model order.
    @usableFromInline var cursor = 0

    /// Creates a reader of a structured value's parts.
    @inlinable public init(
        typeName: String, properties: [NamedValue], navigation: [NavigationValue] = [], etag: String? = nil
    ) {
        self.typeName = typeName
        self.properties = properties
        self.navigation = navigation
        self.etag = etag
    }

    /// The index of the property `name`, looking first where the last one ended.
    @inlinable mutating func find(_ name: String) -> Int? {
        let count = properties.count
        if cursor < count, properties[cursor].name == name {
            cursor += 1
            return cursor - 1
        }
        for index in 0..<count where properties[index].name == name {
            cursor = index + 1
            return index
        }
        return nil
    }

    /// The value of a structural property. A property the payload lacks reads as null, which
    /// only an optional type accepts.
    @inlinable public mutating func value<T: ODataValueConvertible>(
        _ name: String, as type: T.Type = T.self
    )
        throws(TypedValueError) -> T
    {
        guard let index = find(name) else {
            do {
                return try T(odataValue: .null)
            } catch {
                throw TypedValueError(
                    .missingProperty, "the non-nullable property is not in the payload (a $select without it?)",
                    path: typeName + "/" + name)
            }
        }
        do {
            return try T(odataValue: properties[index].value)
        } catch {
            throw error.at(typeName + "/" + name)
        }
    }

    /// A single-valued navigation property: nil when it was not expanded or is null.
    @inlinable public func navigation<T: ODataEntity>(
        _ name: String, as type: T.Type = T.self
    ) throws(TypedValueError) -> T? {
        guard navigation.isEmpty == false else { return nil }
        guard let value = navigation.first(where: { $0.name == name }), let inline = value.inline else { return nil }
        switch inline {
        case .entity(let entity?):
            do {
                return try T(entity: entity)
            } catch {
                throw error.at(typeName + "/" + name)
            }
        case .entity(nil): return nil
        case .collection:
            throw TypedValueError(
                .typeMismatch, "expected one entity, found a collection", path: typeName + "/" + name)
        }
    }

    /// A collection-valued navigation property: nil when it was not expanded.
    public func navigation<T: ODataEntity>(
        _ name: String, as type: [T].Type = [T].self
    )
        throws(TypedValueError) -> [T]?
    {
        guard navigation.isEmpty == false else { return nil }
        guard let value = navigation.first(where: { $0.name == name }), let inline = value.inline else { return nil }
        switch inline {
        case .collection(let collection):
            var result: [T] = []
            result.reserveCapacity(collection.entities.count)
            for (index, entity) in collection.entities.enumerated() {
                do {
                    result.append(try T(entity: entity))
                } catch {
                    throw error.at(typeName + "/" + name + "[\(index)]")
                }
            }
            return result
        case .entity(nil): return []
        case .entity(let entity?):
            do {
                return [try T(entity: entity)]
            } catch {
                throw error.at(typeName + "/" + name)
            }
        }
    }
}

/// Collects the properties of one structured value, for the `write(to:)` of generated types.
public struct StructureWriter: Sendable {
    /// The structural properties written so far, in order.
    public private(set) var properties: [NamedValue] = []
    /// The navigation properties written so far (only with `includesNavigation`).
    public private(set) var navigation: [NavigationValue] = []
    /// Whether expanded navigation values are written (a deep insert).
    public let includesNavigation: Bool

    /// Creates an empty writer.
    public init(includesNavigation: Bool = false) {
        self.includesNavigation = includesNavigation
    }

    /// Writes a structural property; `type` is the declared Edm type where it matters (V2
    /// `Edm.DateTime`, `Edm.Time`).
    public mutating func set<T: ODataValueConvertible>(_ name: String, _ value: T, as type: PrimitiveType? = nil) {
        properties.append(NamedValue(name: name, value: value.odataValue(as: type)))
    }

    /// Writes a single-valued navigation property for a deep insert (nothing when nil).
    public mutating func setNavigation<T: ODataEntity>(_ name: String, _ value: T?) {
        guard includesNavigation, let value else { return }
        var link = NavigationValue(name: name)
        link.inline = .entity(value.entity(includingNavigation: true))
        navigation.append(link)
    }

    /// Writes a collection-valued navigation property for a deep insert (nothing when nil).
    public mutating func setNavigation<T: ODataEntity>(_ name: String, _ values: [T]?) {
        guard includesNavigation, let values else { return }
        var link = NavigationValue(name: name)
        link.inline = .collection(EntityCollection(entities: values.map { $0.entity(includingNavigation: true) }))
        navigation.append(link)
    }
}
