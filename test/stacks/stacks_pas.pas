{ A Free Pascal program with leaks at known lines, for test/stacks.sh: built
  with -gl and ShoalMM, its leak report must name the program's own line of
  each GetMem, New, TObject.Create, SetLength and string concatenation as
  the first frame, then its callers. The script reads each marked line's
  number from this file. }
program stacks_pas;

{$mode objfpc}{$H+}

uses
  ShoalMM, SysUtils, Classes;

type
  PPoint = ^TPoint;
  TPoint = record
    X, Y: Int64;
  end;

  TLeaf = class
    Size: Integer;
  end;

  TNode = class
    Name: string;
    Values: array of Int64;
    constructor Create(Count: Integer);
  end;

  TSpeedTest = class
    procedure Execute;
    function Label_(Number: Integer): TNode;
  end;

var
  Kept: array[0..7] of Pointer;

constructor TNode.Create(Count: Integer);
begin
  Name := 'node ' + IntToStr(Count); { LINE:node_name }
  SetLength(Values, Count); { LINE:node_values }
end;

function TSpeedTest.Label_(Number: Integer): TNode;
begin
  Result := TNode.Create(Number); { LINE:label_create }
end;

procedure TSpeedTest.Execute;
var
  Point: PPoint;
begin
  GetMem(Kept[0], 1000); { LINE:execute_getmem }
  New(Point); { LINE:execute_new }
  Kept[1] := Point;
  Kept[2] := TLeaf.Create; { LINE:execute_leaf }
  Kept[3] := TStringList.Create; { LINE:execute_stringlist }
  Kept[4] := Label_(3); { LINE:execute_label }
end;

var
  Test: TSpeedTest;
begin
  Test := TSpeedTest.Create; { LINE:main_create }
  Test.Execute; { LINE:main_execute }
end.
