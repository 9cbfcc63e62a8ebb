import ODataCore

/// How the cells of a flat page (``FlatCollection``) are bound to an entity table's columns:
/// what each column needs is decided once per page, not once per cell, so that binding a row
/// of a large download costs little more than SQLite's own work.
struct FlatRowPlan {
    enum Binding {
        /// The page has no such property: NULL.
        case absent
        /// The property has the column's own type: the cell is bound as it is stored where
        /// it can be (integers, doubles, strings in place, dates and decimals in a slot).
        case direct(property: Int, type: PrimitiveType)
        /// The property has another type: converted, then stored (`StoreWriter.encode`).
        case converted(property: Int)
    }

    /// Bytes per column for a stored form written row by row (a DateTimeOffset takes 34 to 40
    /// unless its year has more than six digits once biased, a decimal 5 or 6 more than its
    /// digits); longer forms are copied by SQLite instead.
    static let slotSize = 64

    let bindings: [Binding]
    let columns: [StoreSchema.Column]
    /// Cells per row of the page.
    let width: Int

    /// The plan for `page` into `table`, whose columns are all single properties. A property
    /// the table has no column for is an error, as is a page whose arrays do not match its row
    /// count or whose cells point outside them (one built or changed by the caller): its rows
    /// are bound without bounds checks.
    init(_ page: FlatCollection, table: StoreSchema.EntityTable) throws(StoreError) {
        if let problem = page.layoutProblem { throw StoreError(.unsupported, problem) }
        var bindings: [Binding] = []
        bindings.reserveCapacity(table.columns.count)
        for column in table.columns {
            guard let property = page.propertyNames.firstIndex(of: column.path[0]) else {
                bindings.append(.absent)
                continue
            }
            if case .primitive(let type) = column.kind, type == page.propertyTypes[property] {
                bindings.append(.direct(property: property, type: type))
            } else {
                bindings.append(.converted(property: property))
            }
        }
        for name in page.propertyNames where !table.columns.contains(where: { $0.path[0] == name }) {
            throw StoreError(.unsupported, "\(table.entitySet) has no column for the property \(name)")
        }
        self.bindings = bindings
        self.columns = table.columns
        self.width = page.propertyNames.count
    }
}

/// One page being bound: its text, cells and the column slots, valid inside
/// ``StoreWriter/withRows(of:plan:_:)`` only.
struct FlatRowCursor {
    let page: FlatCollection
    let plan: FlatRowPlan
    let text: UnsafeBufferPointer<UInt8>
    let cells: UnsafeBufferPointer<FlatCell>
    let slots: UnsafeMutablePointer<UInt8>
}

extension StoreWriter {
    /// Runs `body` with a cursor over `page`, which `plan` was made for (the plan checked its
    /// layout). Text cells and slots are bound without SQLite
    /// copying them, so every statement bound from the cursor must be reset (its bindings
    /// cleared) before this returns, and bound again for each row before it is stepped.
    func withRows<R>(of page: FlatCollection, plan: FlatRowPlan, _ body: (FlatRowCursor) throws -> R) throws -> R {
        let slotBytes = max(1, plan.bindings.count) * FlatRowPlan.slotSize
        // Cells are read without bounds checks: the page must be as wide as the plan's.
        guard page.propertyNames.count == plan.width, page.cells.count == page.entityCount * plan.width else {
            throw StoreError(.unsupported, "The page is not the one its row plan was made for")
        }
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: slotBytes) { slots in
            try page.text.withUnsafeBufferPointer { text in
                try page.cells.withUnsafeBufferPointer { cells in
                    guard let base = slots.baseAddress else {
                        throw StoreError(.unsupported, "No memory for binding a page of \(page.entityCount) rows")
                    }
                    return try body(FlatRowCursor(page: page, plan: plan, text: text, cells: cells, slots: base))
                }
            }
        }
    }

    /// Binds the property columns of `row` at `first`, `first + 1`, …; with `skippingAbsent`,
    /// not the columns the page has no property for (the caller bound them to NULL once, and
    /// resets the statement without clearing its bindings).
    func bindColumns(of row: Int, from cursor: FlatRowCursor, to statement: Statement, at first: Int32,
                     skippingAbsent: Bool = false, scratch: inout [UInt8]) throws {
        let plan = cursor.plan
        let rowStart = row * plan.width
        for offset in 0..<plan.bindings.count {
            let position = first + Int32(offset)
            switch plan.bindings[offset] {
            case .absent:
                if !skippingAbsent { try statement.bindNull(at: position) }
            case .converted(let property):
                try statement.bind(try encode(cursor.page[row, property], for: plan.columns[offset]), at: position)
            case .direct(let property, let type):
                let slot = cursor.slots + offset * FlatRowPlan.slotSize
                try bindCell(row: row, property: property, cell: cursor.cells[rowStart + property], of: type,
                             from: cursor, slot: slot, to: statement, at: position, scratch: &scratch,
                             column: offset)
            }
        }
    }

    /// Binds one cell whose property has the column's type `type`.
    private func bindCell(row: Int, property: Int, cell: FlatCell, of type: PrimitiveType, from cursor: FlatRowCursor,
                          slot: UnsafeMutablePointer<UInt8>, to statement: Statement, at position: Int32,
                          scratch: inout [UInt8], column: Int) throws {
        switch cell {
        case .null:
            return try statement.bindNull(at: position)
        case .integer(let number) where type != .double && type != .string && type != .guid:
            return try statement.bind(integer: number, at: position)
        case .double(let number) where type == .double:
            return try statement.bind(ValueStorage.encode(.double(number)), at: position)
        case .text(let start, let count) where type == .string || type == .guid:
            return try statement.bindInPlace(cursor.text, start: start, count: count, at: position)
        case .instant(let index) where type == .dateTimeOffset:
            var bytes = ByteSlot(base: slot, capacity: FlatRowPlan.slotSize)
            ValueStorage.appendInstantAndOffset(cursor.page.instants[index], to: &bytes)
            if !bytes.overflowed {
                return try statement.bindInPlace(bytes.bytes, start: 0, count: bytes.count, at: position)
            }
        case .decimal(let index) where type == .decimal:
            var bytes = ByteSlot(base: slot, capacity: FlatRowPlan.slotSize)
            ValueStorage.appendDecimal(cursor.page.decimals[index], to: &bytes)
            if !bytes.overflowed {
                return try statement.bindInPlace(bytes.bytes, start: 0, count: bytes.count, asBlob: true, at: position)
            }
        case .other(let other):
            if case .primitive(let primitive) = cursor.page.others[other], primitive.type == type {
                return try ValueStorage.bind(primitive, to: statement, at: position, scratch: &scratch)
            }
        default:
            break
        }
        try statement.bind(try encode(cursor.page[row, property], for: cursor.plan.columns[column]), at: position)
    }
}
