"""Drives the reference service's V4 root with python-odata (PyPI `python-odata`, import name `odata`) and prints
one JSON object of results for the Swift test to check. Usage: python_odata_client.py SERVICE_URL

Patches (python-odata 0.8.1 bugs; applied here, never in site-packages):
1. EnumTypeProperty.escape_value hard-codes the namespace "Microsoft.Dynamics.DataEntities", so any enum in a
   $filter becomes `Microsoft.Dynamics.DataEntities.OrderStatus'Confirmed'` (400 from any other service). We write
   the enum type's qualified name from $metadata: `Sales.OrderStatus'Confirmed'`.
2. ActionBase._callable always reads `response["value"]`, but a V4 action or function returning a single entity
   sends the entity as the top-level object (no "value" wrapper), so it builds the entity from None and crashes.
   We wrap such responses in {"value": ...}.
Workarounds (no patching needed):
- Context.call_with_query fails for unbound functions (they have no `with_query`); we build ActionCallable directly.
- quiet_progress=True: the library's rich progress output would otherwise go to stdout.
"""
import datetime
import json
import sys

import odata.action
import odata.enumtype
from odata import ODataService
from odata.action import ActionCallable
from odata.entity import EntityBase
from odata.exceptions import NoResultsFound, ODataError

url = sys.argv[1]
service = ODataService(url, reflect_entities=True, quiet_progress=True)
connection = service.default_context.connection
out = {}

# Patch 1: enum literals with their real qualified name.
ENUM_NAMES = {t: n for n, t in service.types.items() if isinstance(t, type) and issubclass(t, odata.enumtype.EnumType)}
odata.enumtype.EnumTypeProperty.escape_value = lambda self, v: f"{ENUM_NAMES[self.enum_class]}'{v.name}'"


# Patch 2: single-entity results of actions and functions.
def _wrap_single_entity(execute):
    def wrapped(self, *args):
        data = execute(self, *args)
        single = isinstance(self.return_type, type) and issubclass(self.return_type, EntityBase)
        return {"value": data} if single and isinstance(data, dict) else data
    return wrapped


for _cls in (odata.action.Action, odata.action.Function):
    _cls._execute_http = _wrap_single_entity(_cls._execute_http)


def error_of(call):
    """Runs call; returns None, or "HTTP <status> <code>" of the OData error it raised."""
    try:
        call()
    except ODataError as error:
        return f"{error.status_code} {error.code}"


def attempt(call):
    """The value of call(), or {"error": "HTTP <status> <code>"} (for checks of known server defects)."""
    try:
        return call()
    except ODataError as error:
        return {"error": f"{error.status_code} {error.code}"}


Partners, Orders, Items = (service.entities[n] for n in ("BusinessPartners", "SalesOrders", "SalesOrderItems"))
Products, Categories = service.entities["Products"], service.entities["ProductCategories"]
OrderStatus, OrderItem = service.types["Sales.OrderStatus"], service.types["Sales.SalesOrderItem"]

# Leftovers of an interrupted earlier run.
for leftover in ("ProductCategories('PO1')", "SalesOrders('SOPY1')"):
    error_of(lambda: connection.execute_delete(service.url + leftover))

# Metadata reflection.
out["entity_sets"] = sorted(service.entities)
out["functions"] = sorted(service.functions)
out["actions"] = sorted(service.actions)
out["order_status_members"] = [m.name for m in OrderStatus]

# Queries: filter, order_by, limit/offset, count; paging through @odata.nextLink.
bp1 = service.query(Orders).filter(Orders.PartnerID == "BP1")
out["filtered_orders"] = [o.OrderID for o in bp1.order_by(Orders.OrderID.desc()).limit(3).offset(1)]
out["filtered_count"] = bp1.order_by(Orders.OrderID.desc()).limit(3).offset(1).count()  # $top/$skip don't count
out["product_count"] = service.query(Products).count()
everything = service.query(Orders).all()
out["all_orders"] = [len(everything), len({o.OrderID for o in everything})]
big_query = service.query(Orders).filter(Orders.GrossAmount > 1000)
big = [o.GrossAmount for o in big_query.order_by(Orders.GrossAmount.desc())]
out["big_orders"] = {"count": len(big), "sorted": big == sorted(big, reverse=True), "top": [str(a) for a in big[:2]]}
out["big_orders_count"] = big_query.count()
bp1_confirmed = bp1.filter(Orders.Status == OrderStatus.Confirmed).order_by(Orders.OrderID.asc())
out["confirmed_bp1"] = [o.OrderID for o in bp1_confirmed]
out["bp1_without_note"] = bp1.filter(Orders.Note.is_null()).count()
since = datetime.datetime(2024, 12, 1, tzinfo=datetime.timezone.utc)
late = service.query(Orders).filter(Orders.OrderDate >= since).order_by(Orders.OrderDate.asc()).limit(3)
out["december_orders"] = [[o.OrderID, o.OrderDate.isoformat()] for o in late]
by_company = service.query(Orders).filter(Orders.Partner.CompanyName == "Company 1").order_by(Orders.OrderID.asc())
out["orders_of_company_1"] = [o.OrderID for o in by_company.limit(3)]
c3 = service.query(Products).filter((Products.CategoryID == "C3") & (Products.Price > 1500))
out["c3_over_1500"] = [p.ProductID for p in c3.order_by(Products.ProductID.asc())]
either = service.query(Products).filter((Products.ProductID == "P1") | (Products.ProductID == "P2"))
out["p1_or_p2"] = [p.ProductID for p in either.order_by(Products.ProductID.asc())]
by_id = service.query(Products).order_by(Products.ProductID.asc())
out["name_contains"] = [p.ProductID for p in by_id.filter(Products.Name.contains("Product 3"))]
out["name_startswith"] = [p.ProductID for p in by_id.filter(Products.Name.startswith("Product 1"))]
rows = bp1.select(Orders.OrderID, Orders.GrossAmount).order_by(Orders.GrossAmount.desc()).limit(2).all()
out["selected"] = [{k: v for k, v in row.items() if not k.startswith("@")} for row in rows]

# Get by key, complex property, navigation, expand.
partner = service.query(Partners).get("BP2")
out["partner_name"] = partner.CompanyName
out["partner_city"] = partner.Address["City"]
out["partner_contacts"] = sorted(c.FirstName for c in partner.Contacts)
out["product_price"] = str(service.query(Products).get("P13").Price)
out["order_partner"] = service.query(Orders).get("SO1").Partner.CompanyName
so0 = service.query(Orders).filter(Orders.OrderID == "SO0").expand(Orders.Items.Product, Orders.Partner).first()
out["expanded_items"] = [[i.ItemPosition, i.ProductID, i.Product.Name] for i in so0.Items]
out["expanded_partner"] = so0.Partner.PartnerID
out["order_status"] = so0.Status.name

# Create, update, re-read, delete.
category = Categories()
category.CategoryID, category.Name = "PO1", "From python-odata"
service.save(category)
out["created"] = [category.CategoryID, category.Name]
category.Name = "Renamed by python-odata"
service.save(category)
out["updated"] = service.query(Categories).get("PO1").Name
service.delete(category)
try:
    service.query(Categories).get("PO1")
    out["deleted"] = False
except NoResultsFound:
    out["deleted"] = True
out["deleted_read"] = error_of(lambda: connection.execute_get(category.__odata__.instance_url))

# Deep insert with @odata.bind: a new order bound to BP2 with two new items bound to products. A conforming server
# gives {"partner": "BP2", "items": [[10, "P1", 1], [20, "P2", 2]], "items_after_delete": 0}.
def deep_insert():
    order = Orders()
    order.OrderID, order.Status, order.Currency = "SOPY1", OrderStatus.New, "EUR"
    order.Partner = service.query(Partners).get("BP2")
    order.Items = []
    for position, product in ((10, "P1"), (20, "P2")):
        item = OrderItem()
        item.ItemPosition, item.Quantity, item.Product = position, position // 10, service.query(Products).get(product)
        order.Items.append(item)
    service.save(order)
    stored = service.query(Orders).filter(Orders.OrderID == "SOPY1").expand(Orders.Items).first()
    result = {"partner": stored.PartnerID, "items": [[i.ItemPosition, i.ProductID, i.Quantity] for i in stored.Items]}
    service.delete(stored)
    result["items_after_delete"] = service.query(Items).filter(Items.OrderID == "SOPY1").count()
    return result


out["deep_insert"] = attempt(deep_insert)

# Function import, alone and with query options; action import.
by_category = service.functions["GetProductsByCategory"]
out["function_products"] = sorted(p.ProductID for p in by_category(CategoryID="C3"))
# $filter, $orderby and $top on a function's result.
narrowed = service.query(Products).filter(Products.Price > 1200).order_by(Products.ProductID.desc()).limit(2)
out["function_with_query"] = [p.ProductID for p in ActionCallable(by_category, service.url).with_query(narrowed)(CategoryID="C3")]
reordered = service.query(Products).order_by(Products.ProductID.desc())
out["function_ordered"] = [p.ProductID for p in ActionCallable(by_category, service.url).with_query(reordered)(CategoryID="C3")]
new_order = service.query(Orders).filter(Orders.Status == OrderStatus.New).order_by(Orders.OrderID.asc()).first()
confirmed = service.actions["ConfirmOrder"](OrderID=new_order.OrderID)
out["action_result"] = [confirmed.OrderID == new_order.OrderID, confirmed.Status.name]
out["action_reread"] = service.query(Orders).get(new_order.OrderID).Status.name
out["action_unknown_order"] = error_of(lambda: service.actions["ConfirmOrder"](OrderID="NOPE"))

print(json.dumps(out))
