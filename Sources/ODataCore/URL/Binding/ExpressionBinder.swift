/// Binds parsed expressions to a model: resolves every property path and function, computes
/// the type of every node with OData's numeric promotion, and rejects type errors with the
/// position and the reason.
public struct ExpressionBinder: Sendable {
    public var model: Model
    /// Parameter aliases of the request, used to type `@p`.
    public var aliases: [String: CommonExpression]
    /// The request's `$compute` aliases and their types: names `$filter`, `$orderby` and
    /// `$select` may use as properties of the instance.
    public var computed: [String: ExpressionType] = [:]

    /// Creates a value from its parts.
    public init(model: Model, aliases: [String: CommonExpression] = [:]) {
        self.model = model
        self.aliases = aliases
    }

    /// Binds `expression`, evaluated on instances of the structured type `itType`.
    /// `input` is the option text the expression was parsed from (for error positions).
    ///
    /// `thisType` is the type of the instances names without a prefix (and `$this`) refer to,
    /// when it differs from `$it`'s: inside `$expand=Nav($filter=…)`, names refer to the
    /// related entities and `$it` to the resource the request addresses (OData 4.01 Part 2,
    /// `$it`).
    public func bind(_ expression: CommonExpression, itType: String, thisType: String? = nil,
                     input: String) throws(BindingError) -> BoundExpression {
        var context = Context(input: input, itType: itType, thisType: thisType ?? itType, variables: [:], depth: 0)
        return try bind(expression, &context)
    }

    /// Binds a `$filter`: the result must be Boolean.
    public func bindFilter(_ expression: CommonExpression, itType: String, thisType: String? = nil,
                           input: String) throws(BindingError) -> BoundExpression {
        let bound = try bind(expression, itType: itType, thisType: thisType, input: input)
        guard bound.type.canBeBoolean else {
            throw BindingError(.typeMismatch, "$filter must be a Boolean expression, not \(bound.type)", input: input, offset: expression.offset)
        }
        return bound
    }

    struct Context {
        var input: String
        /// The type `$it` refers to.
        var itType: String
        /// The type names without a prefix and `$this` refer to.
        var thisType: String
        var variables: [String: ExpressionType]
        var depth: Int
    }

    private func fail(_ code: BindingError.Code, _ message: String, _ expression: CommonExpression, _ context: Context) -> BindingError {
        BindingError(code, message, input: context.input, offset: expression.offset)
    }

    private func bind(_ expression: CommonExpression, _ context: inout Context) throws(BindingError) -> BoundExpression {
        context.depth += 1
        defer { context.depth -= 1 }
        guard context.depth < 200 else { throw fail(.unsupported, "Expression nested too deeply", expression, context) }
        switch expression.node {
        case .literal(let value):
            if case .enumeration(let member) = value, let name = member.typeName {
                guard let enumType = model.enumType(name) else {
                    throw fail(.unknownName, "\(name) is not an enum type of the service", expression, context)
                }
                try model.checkEnumMembers(member, of: enumType, input: context.input, offset: expression.offset)
            }
            return BoundExpression(expression: expression, type: type(of: value))
        case .alias(let name):
            if let value = aliases[name] {
                var bound = try bind(value, &context)
                bound.expression = expression
                return bound
            }
            return BoundExpression(expression: expression, type: .untyped)
        case .array(let items):
            let bound = try items.map { (item) throws(BindingError) in try bind(item, &context) }
            let element = bound.first(where: { !$0.type.isLoose })?.type ?? .untyped
            return BoundExpression(expression: expression, type: .collection(element), operands: bound)
        case .object(let members):
            let bound = try members.map { (member) throws(BindingError) in try bind(member.value, &context) }
            return BoundExpression(expression: expression, type: .untyped, operands: bound)
        case .list(let items):
            let bound = try items.map { (item) throws(BindingError) in try bind(item, &context) }
            let element = bound.first(where: { !$0.type.isLoose })?.type ?? .untyped
            return BoundExpression(expression: expression, type: .collection(element), operands: bound)
        case .typeName(let name):
            guard let kind = model.typeKind(name) else { throw fail(.unknownName, "Unknown type \(name)", expression, context) }
            return BoundExpression(expression: expression, type: expressionType(name, kind))
        case .path(let path):
            return try bindPath(path, expression, &context)
        case .unary(let op, let operand):
            let bound = try bind(operand, &context)
            switch op {
            case .not:
                guard bound.type.canBeBoolean else {
                    throw fail(.typeMismatch, "'not' needs a Boolean operand, not \(bound.type)", operand, context)
                }
                return BoundExpression(expression: expression, type: .primitive(.boolean), operands: [bound])
            case .negate:
                guard bound.type.isLoose || bound.type.primitive.map({ $0.isNumeric || $0 == .duration }) == true else {
                    throw fail(.typeMismatch, "'-' needs a numeric or duration operand, not \(bound.type)", operand, context)
                }
                return BoundExpression(expression: expression, type: bound.type, operands: [bound])
            }
        case .binary(let op, let lhs, let rhs):
            let left = try bind(lhs, &context)
            let right = try bind(rhs, &context)
            let result = try binaryType(op, left, right, rhs, context)
            return BoundExpression(expression: expression, type: result, operands: [left, right])
        case .call(let name, let arguments):
            let bound = try arguments.map { (argument) throws(BindingError) in try bind(argument, &context) }
            return BoundExpression(expression: expression, type: try callType(name, bound, expression, context), operands: bound)
        case .caseOf(let branches):
            var operands: [BoundExpression] = []
            var result: ExpressionType = .null
            for branch in branches {
                let condition = try bind(branch.condition, &context)
                guard condition.type.canBeBoolean else {
                    throw fail(.typeMismatch, "A case condition must be Boolean, not \(condition.type)", branch.condition, context)
                }
                let value = try bind(branch.value, &context)
                if result.isLoose { result = value.type }
                operands += [condition, value]
            }
            return BoundExpression(expression: expression, type: result, operands: operands)
        }
    }

    // MARK: Types

    func type(of value: Value) -> ExpressionType {
        switch value {
        case .null: .null
        case .primitive(let p): .primitive(p.type)
        case .enumeration(let e): e.typeName.map { .enumeration($0) } ?? .untyped
        case .complex(let s): s.typeName.map { .complex($0) } ?? .untyped
        case .entity(let s): s.typeName.map { .entity($0) } ?? .untyped
        case .collection(let items): .collection(items.first.map { type(of: $0) } ?? .untyped)
        }
    }

    func expressionType(_ name: String, _ kind: TypeKind) -> ExpressionType {
        switch kind {
        case .primitive(let p): .primitive(p)
        case .entity: .entity(name)
        case .complex: .complex(name)
        case .enumeration: .enumeration(name)
        case .typeDefinition(let underlying): PrimitiveType(qualifiedName: underlying).map { .primitive($0) } ?? .untyped
        case .untyped, .abstract: .untyped
        }
    }

    func expressionType(_ reference: TypeReference) -> ExpressionType {
        let element = model.typeKind(reference.name).map { expressionType(reference.name, $0) } ?? .untyped
        return reference.isCollection ? .collection(element) : element
    }

    /// Whether values of the two types can be compared with eq/ne/lt/….
    func comparable(_ a: ExpressionType, _ b: ExpressionType) -> Bool {
        if a.isLoose || b.isLoose { return true }
        switch (a, b) {
        case (.primitive(let x), .primitive(let y)):
            if x == y { return true }
            if x.isNumeric && y.isNumeric { return true }
            let dates: Set<PrimitiveType> = [.dateTimeOffset, .dateTime, .date]
            if dates.contains(x) && dates.contains(y) { return true }
            let durations: Set<PrimitiveType> = [.duration, .time]
            if durations.contains(x) && durations.contains(y) { return true }
            if x.isSpatial && y.isSpatial { return true }
            return false
        case (.enumeration(let x), .enumeration(let y)): return x == y
        case (.enumeration, .primitive(let p)), (.primitive(let p), .enumeration):
            // Enum members may be written as strings or numbers.
            return p == .string || p.isIntegral
        case (.complex, .complex), (.entity, .entity): return true
        case (.collection, .collection): return true
        default: return false
        }
    }

    private func binaryType(_ op: BinaryOperator, _ left: BoundExpression, _ right: BoundExpression, _ rhs: CommonExpression,
                            _ context: Context) throws(BindingError) -> ExpressionType {
        let a = left.type, b = right.type
        func mismatch(_ message: String) -> BindingError {
            BindingError(.typeMismatch, message, input: context.input, offset: rhs.offset)
        }
        switch op {
        case .and, .or:
            guard a.canBeBoolean, b.canBeBoolean else {
                throw mismatch("'\(op.rawValue)' needs Boolean operands, not \(a) and \(b)")
            }
            return .primitive(.boolean)
        case .eq, .ne, .gt, .ge, .lt, .le:
            guard comparable(a, b) || isDurationString(left, right) || isDurationString(right, left) else {
                throw mismatch("Cannot compare \(a) with \(b)")
            }
            try checkEnumStrings(left, right, context)
            try checkEnumStrings(right, left, context)
            if op != .eq && op != .ne {
                for t in [a, b] {
                    if case .primitive(let p) = t, p == .boolean || p.isSpatial || p == .binary || p == .stream {
                        throw mismatch("\(p.rawValue) values have no order for '\(op.rawValue)'")
                    }
                    if case .complex = t { throw mismatch("Complex values have no order") }
                    if case .entity = t { throw mismatch("Entities have no order") }
                }
            }
            return .primitive(.boolean)
        case .has:
            guard a.isLoose || { if case .enumeration = a { return true }; return false }() else {
                throw BindingError(.typeMismatch, "'has' needs an enum on its left, not \(a)", input: context.input, offset: left.expression.offset)
            }
            guard comparable(a, b) else { throw mismatch("'has' compares \(a) with \(b)") }
            try checkEnumStrings(left, right, context)
            return .primitive(.boolean)
        case .in:
            switch b {
            case .collection(let element):
                guard comparable(a, element) || right.operands.allSatisfy({ isDurationString(left, $0) }) else {
                    throw mismatch("Cannot look for \(a) in a collection of \(element)")
                }
                for item in right.operands { try checkEnumStrings(left, item, context) }
            case .untyped, .null: break
            default: throw mismatch("The right side of 'in' must be a collection, not \(b)")
            }
            return .primitive(.boolean)
        case .add, .sub, .mul, .div, .divby, .mod:
            if a.isLoose && b.isLoose { return .untyped }
            if a.isLoose { return b }
            if b.isLoose { return a }
            guard let x = a.primitive, let y = b.primitive else { throw mismatch("'\(op.rawValue)' needs primitive operands, not \(a) and \(b)") }
            if x.isNumeric && y.isNumeric, let promoted = PrimitiveType.promoted(x, y) {
                // No result for a division by zero: integers and decimals have none, and the
                // store's SQL would answer NULL (no rows) where OData's doubles give INF.
                if op == .div || op == .mod || op == .divby,
                   case .literal(.primitive(let divisor)) = right.expression.node, divisor.decimalValue?.isZero == true {
                    throw mismatch("Division by zero ('\(op.rawValue) 0') has no \(promoted.rawValue) result")
                }
                if op == .divby { return .primitive(promoted == .double || promoted == .single ? .double : .decimal) }
                return .primitive(promoted)
            }
            if op == .add || op == .sub {
                switch (x, y) {
                case (.dateTimeOffset, .duration), (.date, .duration), (.duration, .duration), (.dateTime, .duration), (.dateTime, .time):
                    return .primitive(x)
                case (.dateTimeOffset, .dateTimeOffset) where op == .sub, (.date, .date) where op == .sub:
                    return .primitive(.duration)
                default: break
                }
            }
            if (op == .mul || op == .div) && x == .duration && y.isNumeric { return .primitive(.duration) }
            throw mismatch("'\(op.rawValue)' cannot combine \(x.rawValue) and \(y.rawValue)")
        }
    }

    private func callType(_ name: String, _ args: [BoundExpression], _ expression: CommonExpression, _ context: Context) throws(BindingError) -> ExpressionType {
        func expect(_ index: Int, _ allowed: Set<PrimitiveType>, _ what: String) throws(BindingError) {
            guard index < args.count else { return }
            let t = args[index].type
            if t.isLoose { return }
            if case .collection = t, ["contains", "startswith", "endswith", "indexof", "concat", "length"].contains(name) { return }
            guard let p = t.primitive, allowed.contains(p) else {
                throw BindingError(.typeMismatch, "Argument \(index + 1) of \(name) must be \(what), not \(t)", input: context.input, offset: args[index].expression.offset)
            }
        }
        let strings: Set<PrimitiveType> = [.string]
        let integers: Set<PrimitiveType> = [.byte, .sbyte, .int16, .int32, .int64]
        let numbers: Set<PrimitiveType> = integers.union([.decimal, .single, .double])
        let withDate: Set<PrimitiveType> = [.date, .dateTimeOffset, .dateTime]
        let withTime: Set<PrimitiveType> = [.timeOfDay, .dateTimeOffset, .dateTime, .time]
        switch name {
        case "contains", "startswith", "endswith", "matchespattern", "substringof":
            try expect(0, strings, "a string")
            try expect(1, strings, "a string")
            return .primitive(.boolean)
        case "length":
            try expect(0, strings, "a string")
            return .primitive(.int32)
        case "indexof":
            try expect(0, strings, "a string")
            try expect(1, strings, "a string")
            return .primitive(.int32)
        case "substring":
            try expect(0, strings, "a string")
            try expect(1, integers, "an integer")
            try expect(2, integers, "an integer")
            return .primitive(.string)
        case "tolower", "toupper", "trim":
            try expect(0, strings, "a string")
            return .primitive(.string)
        case "concat":
            try expect(0, strings, "a string")
            try expect(1, strings, "a string")
            return args.first.map { if case .collection = $0.type { return $0.type }; return .primitive(.string) } ?? .primitive(.string)
        case "replace":
            for i in 0..<3 { try expect(i, strings, "a string") }
            return .primitive(.string)
        case "year", "month", "day":
            try expect(0, withDate, "a date")
            return .primitive(.int32)
        case "hour", "minute", "second":
            try expect(0, withTime, "a time")
            return .primitive(.int32)
        case "fractionalseconds":
            try expect(0, withTime, "a time")
            return .primitive(.decimal)
        case "totalseconds":
            try expect(0, [.duration, .time], "a duration")
            return .primitive(.decimal)
        case "date":
            try expect(0, [.dateTimeOffset, .dateTime], "a date-time")
            return .primitive(.date)
        case "time":
            try expect(0, [.dateTimeOffset, .dateTime], "a date-time")
            return .primitive(.timeOfDay)
        case "totaloffsetminutes":
            try expect(0, [.dateTimeOffset], "a date-time-offset")
            return .primitive(.int32)
        case "now", "mindatetime", "maxdatetime":
            return .primitive(.dateTimeOffset)
        case _ where CanonicalFunctions.localState(name) != nil:
            return .primitive(.boolean)
        case "round", "floor", "ceiling":
            try expect(0, numbers, "a number")
            if let p = args.first?.type.primitive, p == .single || p == .double { return .primitive(.double) }
            return args.first?.type.primitive.map { $0.isIntegral ? .primitive(.decimal) : .primitive($0) } ?? .untyped
        case "geo.distance", "geo.length":
            return .primitive(.double)
        case "geo.intersects":
            return .primitive(.boolean)
        case "hassubset", "hassubsequence":
            return .primitive(.boolean)
        case "isof", "cast":
            try checkTypeArgument(args, name, context)
            // With one argument the current instance is what is tested or cast.
            try checkCast(from: args.count == 1 ? structuredType(context.thisType) : args[0].type, to: args.last?.type,
                          name, args.last?.expression.offset ?? 0, context)
            return name == "isof" ? .primitive(.boolean) : args.last?.type ?? .untyped
        default:
            return .untyped
        }
    }

    /// A duration written as a plain string (`ShelfLife eq 'P12DT23H59M59.999999999999S'`, 4.01,
    /// whose `duration` prefix is optional) against a duration: a string literal that is one.
    private func isDurationString(_ durationSide: BoundExpression, _ other: BoundExpression) -> Bool {
        guard case .primitive(let type) = durationSide.type, type == .duration || type == .time,
            case .literal(.primitive(.string(let text))) = other.expression.node
        else { return false }
        return (try? Literal.parsePayloadValue(text, as: .duration)) != nil
    }

    /// An enum value written as a plain string (`Color eq 'Red'`, 4.01) names members of the
    /// enum type on the other side: checked here, as enum literals are.
    private func checkEnumStrings(_ enumSide: BoundExpression, _ other: BoundExpression, _ context: Context) throws(BindingError) {
        guard case .enumeration(let name) = enumSide.type, let enumType = model.enumType(name),
              case .literal(.primitive(.string(let text))) = other.expression.node else { return }
        let members = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        try model.checkEnumMembers(EnumValue(typeName: nil, members: members), of: enumType, input: context.input,
                                   offset: other.expression.offset)
    }

    /// A cast of a structured value stays in its type hierarchy (to a derived type, or to a
    /// base type), as path segments do; structured and primitive values do not cast into each
    /// other. `what` names the cast for the message.
    private func checkCast(from source: ExpressionType, to target: ExpressionType?, _ what: String, _ offset: Int,
                           _ context: Context) throws(BindingError) {
        guard let target else { return }
        var from = source
        if case .collection(let element) = from { from = element }
        func fail(_ message: String) -> BindingError {
            BindingError(.typeMismatch, message, input: context.input, offset: offset)
        }
        switch (from, target) {
        case (.entity(let a), .entity(let b)), (.complex(let a), .complex(let b)):
            guard model.isType(b, derivedFrom: a) || model.isType(a, derivedFrom: b) else {
                throw fail("\(what): \(b) is not in the type hierarchy of \(a) (neither derived from it nor its base)")
            }
        case (.entity(let a), _), (.complex(let a), _):
            throw fail("\(what): a value of \(a) cannot be cast to \(target)")
        case (.primitive, .entity(let b)), (.primitive, .complex(let b)), (.enumeration, .entity(let b)),
             (.enumeration, .complex(let b)):
            throw fail("\(what): a value of \(from) cannot be cast to the structured type \(b)")
        default:
            break
        }
    }

    private func checkTypeArgument(_ args: [BoundExpression], _ name: String, _ context: Context) throws(BindingError) {
        guard let last = args.last, case .typeName = last.expression.node else {
            throw BindingError(.invalidArguments, "\(name) needs a type name as its last argument", input: context.input,
                               offset: args.last?.expression.offset ?? 0)
        }
    }

    // MARK: Paths

    private func bindPath(_ path: PathExpression, _ expression: CommonExpression, _ context: inout Context) throws(BindingError) -> BoundExpression {
        var current: ExpressionType
        var steps: [BoundStep] = []
        var operands: [BoundExpression] = []
        var remaining = path.steps[...]
        switch path.root {
        case .it:
            current = structuredType(context.itType)
        case .implicit, .this:
            current = structuredType(context.thisType)
        case .variable(let name):
            guard let type = context.variables[name] else {
                throw fail(.unknownName, "Lambda variable \(name) is not in scope", expression, context)
            }
            current = type
        case .alias(let name):
            if let value = aliases[name] {
                current = try bind(value, &context).type
            } else {
                current = .untyped
            }
        case .root:
            guard case .member(let setName)? = remaining.first else {
                throw fail(.invalidSegment, "$root must be followed by an entity set", expression, context)
            }
            remaining = remaining.dropFirst()
            if let set = model.entitySet(setName) {
                current = .collection(.entity(set.entityType))
            } else if let singleton = model.singleton(setName) {
                current = .entity(singleton.type)
            } else {
                throw fail(.unknownName, "\(setName) is not an entity set or singleton", expression, context)
            }
            steps.append(BoundStep(kind: .entitySet, name: setName, type: current))
        }
        for step in remaining {
            switch step {
            case .member(let name):
                let owner: String
                switch current {
                case .entity(let t), .complex(let t): owner = t
                case .untyped:
                    steps.append(BoundStep(kind: .dynamicProperty, name: name, type: .untyped))
                    continue
                default:
                    throw fail(.invalidSegment, "\(name) cannot follow a value of type \(current)", expression, context)
                }
                if let property = model.property(name, ofStructuredType: owner) {
                    current = expressionType(property.type)
                    steps.append(BoundStep(kind: .property, name: name, type: current))
                } else if let nav = model.navigationProperty(name, ofStructuredType: owner) {
                    current = expressionType(nav.type)
                    steps.append(BoundStep(kind: .navigation, name: name, type: current))
                } else if steps.isEmpty, let type = computed[name] {
                    // A `$compute` alias: a property of the instance for this request.
                    current = type
                    steps.append(BoundStep(kind: .dynamicProperty, name: name, type: type))
                } else if isOpen(owner) {
                    current = .untyped
                    steps.append(BoundStep(kind: .dynamicProperty, name: name, type: .untyped))
                } else {
                    throw fail(.unknownName, "\(owner) has no property \(name)", expression, context)
                }
            case .cast(let name):
                guard let kind = model.typeKind(name) else {
                    throw fail(.unknownName, "Unknown type \(name)", expression, context)
                }
                let target = expressionType(name, kind)
                try checkCast(from: current, to: target, "The cast to \(name)", expression.offset, context)
                if case .collection = current { current = .collection(target) } else { current = target }
                steps.append(BoundStep(kind: .cast, name: name, type: current))
            case .key:
                guard case .collection(let element) = current else {
                    throw fail(.invalidKey, "A key needs a collection", expression, context)
                }
                current = element
                steps.append(BoundStep(kind: .key, name: "", type: current))
            case .count(let filter, _):
                guard case .collection(let element) = current else {
                    throw fail(.invalidSegment, "$count needs a collection, not \(current)", expression, context)
                }
                if let filter {
                    var inner = context
                    inner.thisType = element.structuredName ?? context.thisType
                    operands.append(try bind(filter, &inner))
                }
                current = .primitive(.int64)
                steps.append(BoundStep(kind: .count, name: "$count", type: current))
            case .filter(let condition):
                guard case .collection(let element) = current else {
                    throw fail(.invalidSegment, "$filter needs a collection", expression, context)
                }
                var inner = context
                inner.thisType = element.structuredName ?? context.thisType
                operands.append(try bind(condition, &inner))
                steps.append(BoundStep(kind: .filter, name: "$filter", type: current))
            case .lambda(let kind, let variable, let predicate):
                guard case .collection(let element) = current else {
                    throw fail(.invalidSegment, "\(kind.rawValue) needs a collection, not \(current)", expression, context)
                }
                if let predicate {
                    var inner = context
                    if let variable { inner.variables[variable] = element }
                    let bound = try bind(predicate, &inner)
                    guard bound.type.canBeBoolean else {
                        throw BindingError(.typeMismatch, "A lambda predicate must be Boolean, not \(bound.type)", input: context.input, offset: predicate.offset)
                    }
                    operands.append(bound)
                }
                current = .primitive(.boolean)
                steps.append(BoundStep(kind: kind == .any ? .any : .all, name: variable ?? "", type: current))
            case .function(let name, let arguments):
                for argument in arguments { operands.append(try bind(argument.value, &context)) }
                let qualified = name.contains(".") ? name : model.schemas.first.map { $0.namespace + "." + name } ?? name
                guard let op = model.functions(qualified).first(where: { $0.isBound }) else {
                    throw fail(.unknownName, "\(name) is not a bound function", expression, context)
                }
                current = op.returnType.map(expressionType) ?? .untyped
                steps.append(BoundStep(kind: .function, name: qualified, type: current))
            case .annotation(let term):
                current = .untyped
                steps.append(BoundStep(kind: .annotation, name: term, type: current))
            }
        }
        return BoundExpression(expression: expression, type: current, operands: operands, steps: steps)
    }

    private func structuredType(_ name: String) -> ExpressionType {
        if model.entityType(name) != nil { return .entity(name) }
        if model.complexType(name) != nil { return .complex(name) }
        return .untyped
    }

    private func isOpen(_ name: String) -> Bool { model.isOpen(name) }
}

extension ExpressionType {
    var structuredName: String? {
        switch self {
        case .entity(let name), .complex(let name): name
        default: nil
        }
    }
}
