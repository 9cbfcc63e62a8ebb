import ODataCore

extension Model {
    /// The stored number of an enum value given as member names or numbers (flags OR-ed).
    func enumNumber(_ members: [String], _ typeName: String) throws(StoreError) -> Int64 {
        guard let type = enumType(typeName) else { throw StoreError(.unknownProperty, "Unknown enum type \(typeName)") }
        if !type.isFlags && members.count > 1 { throw StoreError(.unsupported, "\(typeName) is not a flags enum") }
        var result: Int64 = 0
        for member in members {
            let name = member.trimmingCharacters(in: .whitespaces)
            if let found = type.member(named: name) {
                result |= found.value
            } else if let number = Int64(name) {
                result |= number
            } else {
                throw StoreError(.unsupported, "\(name) is not a member of \(typeName)")
            }
        }
        return result
    }
}
