import ODataCore
import Testing

/// Issue 34, item 18: values, entities and query results read as text a person understands,
/// and typed accessors read properties without pattern matching.
@Suite struct ReadableValueTests {
    static let order = Entity(typeName: "Sales.SalesOrder", properties: [
        NamedValue(name: "OrderID", value: .primitive(.string("SO1"))),
        NamedValue(name: "RequestID", value: .primitive(.int32(412))),
        NamedValue(name: "Big", value: .primitive(.int64(9_000_000_000))),
        NamedValue(name: "Amount", value: .primitive(.decimal(DecimalValue("7014.80") ?? DecimalValue(0)))),
        NamedValue(name: "Paid", value: .primitive(.boolean(true))),
        NamedValue(name: "Note", value: .null),
        NamedValue(name: "Status", value: .enumeration(EnumValue(typeName: "Sales.OrderStatus", members: ["New"]))),
        NamedValue(name: "Tags", value: .collection([.primitive(.string("a")), .primitive(.string("it's"))])),
    ])

    @Test func valuesPrintAsLiterals() {
        #expect(Value.primitive(.int32(412)).description == "412")
        #expect(Value.primitive(.string("it's")).description == "'it''s'")
        #expect(Value.null.description == "null")
        #expect(String(describing: Self.order["RequestID"]) == "Optional(412)")
        #expect("\(Self.order["Status"] ?? .null)" == "Sales.OrderStatus'New'")
        #expect("\(Self.order["Tags"] ?? .null)" == "['a', 'it''s']")
        let address = Value.complex(StructuredValue(typeName: "Sales.Address", properties: [
            NamedValue(name: "City", value: .primitive(.string("Bonn")))]))
        #expect(address.description == "Sales.Address(City: 'Bonn')")
    }

    @Test func entitiesPrintTheirPropertiesAndNavigation() {
        var order = Self.order
        var items = NavigationValue(name: "Items")
        items.inline = .collection(EntityCollection(entities: [Entity(), Entity()]))
        order.navigation = [items]
        #expect(order.description == "Sales.SalesOrder(OrderID: 'SO1', RequestID: 412, Big: 9000000000, Amount: 7014.80, "
            + "Paid: true, Note: null, Status: Sales.OrderStatus'New', Tags: ['a', 'it''s'], Items: [2 entities])")
    }

    @Test func typedAccessorsReadWithoutPatternMatching() {
        let order = Self.order
        #expect(order.int64("RequestID") == 412)
        #expect(order.int64("Big") == 9_000_000_000)
        #expect(order.string("OrderID") == "SO1")
        #expect(order.bool("Paid") == true)
        #expect(order.decimal("Amount") == DecimalValue("7014.8"))
        #expect(order.double("RequestID") == 412)
        // Absent, null and another type are nil, never a default.
        #expect(order.int64("Missing") == nil)
        #expect(order.string("Note") == nil)
        #expect(order.int64("OrderID") == nil)
        #expect(order.string("RequestID") == nil)
    }
}
