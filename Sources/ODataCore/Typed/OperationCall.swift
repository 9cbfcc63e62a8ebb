/// The answer of a function or action, before it is read into the call's Swift result type.
public enum OperationOutput: Sendable, Hashable {
    /// No content (`204`).
    case none
    /// One entity, or null.
    case entity(Entity?)
    /// A collection of entities.
    case collection(EntityCollection)
    /// A primitive, enum, complex value or a collection of them.
    case value(Value)
}

/// One parameter of a typed function or action call.
public struct OperationParameter: Sendable, Hashable {
    /// The parameter's name in the model.
    public let name: String
    /// The value as OData.
    public let value: Value

    /// A parameter `name` with `value`; `type` is the declared Edm type where it matters.
    public init<T: ODataValueConvertible>(_ name: String, _ value: T, type: PrimitiveType? = nil) {
        self.name = name
        self.value = value.odataValue(as: type)
    }
}

/// Reads an ``OperationOutput`` into a Swift result.
public struct OperationResultReader<Result: Sendable>: Sendable {
    let read: @Sendable (OperationOutput) throws(TypedValueError) -> Result

    /// A result read by `read`.
    public init(_ read: @escaping @Sendable (OperationOutput) throws(TypedValueError) -> Result) { self.read = read }

    /// Reads `output`.
    public func callAsFunction(_ output: OperationOutput) throws(TypedValueError) -> Result { try read(output) }
}

extension OperationResultReader where Result == Void {
    /// No result.
    public static var none: OperationResultReader<Void> { OperationResultReader { _ in () } }
}

extension OperationResultReader {
    /// One entity of type `T`, or nil.
    public static func entity<T: ODataEntity>(_ type: T.Type) -> OperationResultReader<T?> where Result == T? {
        OperationResultReader<T?> { (output) throws(TypedValueError) -> T? in
            switch output {
            case .none, .entity(nil): return nil
            case .entity(let entity?): return try T(entity: entity)
            case .value(.null): return nil
            case .value(let value): return try T(odataValue: value)
            case .collection:
                throw TypedValueError(.unexpectedResult, "expected one \(T.odataTypeName), found a collection")
            }
        }
    }

    /// Entities of type `T`.
    public static func entities<T: ODataEntity>(_ type: T.Type) -> OperationResultReader<[T]> where Result == [T] {
        OperationResultReader<[T]> { (output) throws(TypedValueError) -> [T] in
            switch output {
            case .collection(let collection):
                var result: [T] = []
                result.reserveCapacity(collection.entities.count)
                for entity in collection.entities { result.append(try T(entity: entity)) }
                return result
            case .value(let value): return try [T](odataValue: value)
            case .none: return []
            case .entity:
                throw TypedValueError(
                    .unexpectedResult, "expected a collection of \(T.odataTypeName), found one entity")
            }
        }
    }

}

extension OperationResultReader where Result: ODataValueConvertible {
    /// A value: primitive, enum, complex, or a collection of them.
    public static var value: OperationResultReader<Result> {
        OperationResultReader { (output) throws(TypedValueError) -> Result in
            switch output {
            case .value(let value): return try Result(odataValue: value)
            case .none: return try Result(odataValue: .null)
            case .entity(let entity?):
                return try Result(
                    odataValue: .complex(StructuredValue(typeName: entity.typeName, properties: entity.properties)))
            case .entity(nil): return try Result(odataValue: .null)
            case .collection:
                throw TypedValueError(.unexpectedResult, "expected a value, found a collection of entities")
            }
        }
    }
}

/// A typed call of a function import or action import, written by `oodata generate`. Run it
/// with the data service; it goes to the backend only (an offline store cannot run
/// operations).
public struct OperationCall<Result: Sendable>: Sendable {
    /// Whether the call is a function (no side effects) or an action.
    public enum Kind: String, Sendable { case function, action }

    /// The import's name (the first URL segment).
    public let name: String
    /// Function or action.
    public let kind: Kind
    /// The parameters in declared order.
    public let parameters: [OperationParameter]
    /// V2 function imports: the declared `m:HttpMethod` (GET when nil).
    public let httpMethod: String?
    /// Reads the answer.
    public let result: OperationResultReader<Result>
    /// For a bound operation: the entity or collection it is bound to (`name` is then the
    /// operation's qualified name).
    public let binding: TypedPath?

    init(
        name: String, kind: Kind, parameters: [OperationParameter], httpMethod: String?,
        result: OperationResultReader<Result>, binding: TypedPath? = nil
    ) {
        self.name = name
        self.kind = kind
        self.parameters = parameters
        self.httpMethod = httpMethod
        self.result = result
        self.binding = binding
    }

    /// A call of the bound function `qualifiedName` on `target` (an entity or a collection):
    /// `GET Customers('A')/Ns.Rating(Year=2024)`.
    public static func boundFunction(
        _ qualifiedName: String, on target: TypedPath, parameters: [OperationParameter] = [],
        result: OperationResultReader<Result>
    ) -> OperationCall {
        OperationCall(
            name: qualifiedName, kind: .function, parameters: parameters, httpMethod: nil, result: result,
            binding: target)
    }

    /// A call of the bound action `qualifiedName` on `target`: `POST Orders('1')/Ns.Confirm`.
    public static func boundAction(
        _ qualifiedName: String, on target: TypedPath, parameters: [OperationParameter] = [],
        result: OperationResultReader<Result>
    ) -> OperationCall {
        OperationCall(
            name: qualifiedName, kind: .action, parameters: parameters, httpMethod: nil, result: result,
            binding: target)
    }

    /// A call of the function import `name`.
    public static func function(
        _ name: String, parameters: [OperationParameter] = [], httpMethod: String? = nil,
        result: OperationResultReader<Result>
    ) -> OperationCall {
        OperationCall(name: name, kind: .function, parameters: parameters, httpMethod: httpMethod, result: result)
    }

    /// A call of the action import `name`.
    public static func action(
        _ name: String, parameters: [OperationParameter] = [], result: OperationResultReader<Result>
    ) -> OperationCall {
        OperationCall(name: name, kind: .action, parameters: parameters, httpMethod: nil, result: result)
    }

    /// The request for a service of `version`: method, URL relative to the service root, body.
    ///
    /// - V4 functions: `GET Name(P1=lit,P2=lit)`;
    /// - V4 actions: `POST Name` with the parameters as a JSON object;
    /// - V2 function imports: `GET` (or the declared method) `Name?P1=lit&P2=lit`.
    public func request(for version: ODataVersion) -> (method: String, url: String, body: [UInt8]) {
        let name = binding.map { $0.text(for: version) + "/" + self.name } ?? self.name
        if version.isLegacy {
            let query = parameters.filter { $0.value != .null }.map {
                $0.name + "=" + QueryText.literal($0.value, version: version)
            }
            let url = query.isEmpty ? name : name + "?" + query.joined(separator: "&")
            return ((httpMethod ?? "GET").uppercased(), url, [])
        }
        switch kind {
        case .function:
            // Primitive and enum values inline; complex values and collections as parameter
            // aliases (the ABNF allows only those in the parentheses).
            var arguments: [String] = []
            var aliases: [String] = []
            for parameter in parameters {
                switch parameter.value {
                case .complex, .collection, .entity:
                    let alias = "@p\(aliases.count + 1)"
                    arguments.append(parameter.name + "=" + alias)
                    aliases.append(alias + "=" + QueryText.literal(parameter.value, version: version))
                default:
                    arguments.append(parameter.name + "=" + QueryText.pathLiteral(parameter.value, version: version))
                }
            }
            let call = name + "(" + arguments.joined(separator: ",") + ")"
            return ("GET", aliases.isEmpty ? call : call + "?" + aliases.joined(separator: "&"), [])
        case .action:
            let body = V4JSONWriter(format: JSONFormat(metadata: .none)).write(
                Entity(properties: parameters.map { NamedValue(name: $0.name, value: $0.value) }))
            return ("POST", name, body)
        }
    }
}
